//! The keys that say what the host does when a stage fails or stalls: `restart`,
//! `max_restarts`, `restart_window`, `restart_backoff` and `stall_timeout`, each in
//! `[pipeline]` (the default) and in a `[[stage]]` (that stage's own).

use std::fmt;
use std::time::Duration;

use serde::Deserialize;

/// When a failed stage is started again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RestartPolicy {
    /// A failure stops the run, naming the stage.
    #[default]
    Never,
    /// Restart after a crash, a signal, a non-zero exit, a plugin error or a stall, once the
    /// stage has run. A stage that fails while it starts (a bad param, a missing library)
    /// would fail again: the run stops.
    OnFailure,
    /// As `on-failure`, and also after a failure while starting and after an exit that did
    /// not finish the stream.
    Always,
}

impl RestartPolicy {
    pub fn name(self) -> &'static str {
        match self {
            RestartPolicy::Never => "never",
            RestartPolicy::OnFailure => "on-failure",
            RestartPolicy::Always => "always",
        }
    }
}

/// A duration as written in a pipeline file: a number and a unit, `"250ms"`, `"2s"`,
/// `"1.5s"`, `"1m"`; `"off"` where the key allows switching it off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DurationSpec(pub Option<Duration>);

impl DurationSpec {
    pub fn parse(text: &str) -> Option<DurationSpec> {
        let text = text.trim();
        if text == "off" {
            return Some(DurationSpec(None));
        }
        let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
        let (number, unit) = text.split_at(split);
        let value: f64 = number.parse().ok()?;
        let seconds = match unit.trim() {
            "ms" => value / 1000.0,
            "s" => value,
            "m" | "min" => value * 60.0,
            "h" => value * 3600.0,
            _ => return None,
        };
        Duration::try_from_secs_f64(seconds).ok().map(|d| DurationSpec(Some(d)))
    }
}

impl<'de> Deserialize<'de> for DurationSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        DurationSpec::parse(&text).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "invalid duration `{text}`, expected a number and a unit (\"250ms\", \"2s\", \"1.5m\") or \"off\""
            ))
        })
    }
}

impl fmt::Display for DurationSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            None => f.write_str("off"),
            Some(d) => write!(f, "{}", format_duration(d)),
        }
    }
}

/// `1.5 s`, `250 ms`: how durations are shown in messages.
pub fn format_duration(d: Duration) -> String {
    if d < Duration::from_secs(1) { format!("{} ms", d.as_millis()) } else { format!("{:.1} s", d.as_secs_f64()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_written() {
        assert_eq!(DurationSpec::parse("250ms"), Some(DurationSpec(Some(Duration::from_millis(250)))));
        assert_eq!(DurationSpec::parse("2s"), Some(DurationSpec(Some(Duration::from_secs(2)))));
        assert_eq!(DurationSpec::parse("1.5s"), Some(DurationSpec(Some(Duration::from_millis(1500)))));
        assert_eq!(DurationSpec::parse("1m"), Some(DurationSpec(Some(Duration::from_secs(60)))));
        assert_eq!(DurationSpec::parse("off"), Some(DurationSpec(None)));
        for bad in ["", "2", "s", "2 parsecs", "-1s", "1e99h", "..s"] {
            assert_eq!(DurationSpec::parse(bad), None, "{bad}");
        }
    }
}
