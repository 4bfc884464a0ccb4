//! Each stage's supervision: its restart policy and budget, and its watchdog, from its own
//! keys or the `[pipeline]` defaults.

use std::time::Duration;

use toml::Spanned;

use crate::config::{Diagnostics, DurationSpec, PipelineFile, RestartPolicy, SourceFile, StageSection};

/// Restarts allowed within the window before the host gives up.
pub const DEFAULT_MAX_RESTARTS: u32 = 5;
pub const DEFAULT_RESTART_WINDOW: Duration = Duration::from_secs(60);
pub const DEFAULT_RESTART_BACKOFF: Duration = Duration::from_millis(100);
/// Long enough for any sane frame, short enough that a hung run is noticed.
pub const DEFAULT_STALL_TIMEOUT: Duration = Duration::from_secs(30);

/// What the host does when a stage fails or stalls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Supervision {
    pub restart: RestartPolicy,
    pub max_restarts: u32,
    pub window: Duration,
    /// Wait before the first restart in a window; doubled for each further one.
    pub backoff: Duration,
    /// `None`: no watchdog.
    pub stall_timeout: Option<Duration>,
}

impl Default for Supervision {
    fn default() -> Supervision {
        Supervision {
            restart: RestartPolicy::Never,
            max_restarts: DEFAULT_MAX_RESTARTS,
            window: DEFAULT_RESTART_WINDOW,
            backoff: DEFAULT_RESTART_BACKOFF,
            stall_timeout: Some(DEFAULT_STALL_TIMEOUT),
        }
    }
}

/// The keys of one table (`[pipeline]` or a `[[stage]]`), borrowed.
struct Keys<'a> {
    restart: Option<&'a Spanned<RestartPolicy>>,
    max_restarts: Option<&'a Spanned<u32>>,
    window: Option<&'a Spanned<DurationSpec>>,
    backoff: Option<&'a Spanned<DurationSpec>>,
    stall_timeout: Option<&'a Spanned<DurationSpec>>,
}

impl Supervision {
    /// The `[pipeline]` defaults.
    pub fn defaults(source: &SourceFile, file: &PipelineFile, diags: &mut Diagnostics) -> Supervision {
        let p = &file.pipeline;
        let keys = Keys {
            restart: p.restart.as_ref(),
            max_restarts: p.max_restarts.as_ref(),
            window: p.restart_window.as_ref(),
            backoff: p.restart_backoff.as_ref(),
            stall_timeout: p.stall_timeout.as_ref(),
        };
        Supervision::default().with(source, keys, diags)
    }

    /// A stage's own, over the pipeline's.
    pub fn for_stage(self, source: &SourceFile, stage: &StageSection, diags: &mut Diagnostics) -> Supervision {
        let keys = Keys {
            restart: stage.restart.as_ref(),
            max_restarts: stage.max_restarts.as_ref(),
            window: stage.restart_window.as_ref(),
            backoff: stage.restart_backoff.as_ref(),
            stall_timeout: stage.stall_timeout.as_ref(),
        };
        self.with(source, keys, diags)
    }

    fn with(mut self, source: &SourceFile, keys: Keys<'_>, diags: &mut Diagnostics) -> Supervision {
        if let Some(r) = keys.restart {
            self.restart = *r.get_ref();
        }
        if let Some(m) = keys.max_restarts {
            if *m.get_ref() == 0 {
                diags.error_at(
                    source,
                    m.span(),
                    "max_restarts must be at least 1 (to never restart, set restart = \"never\")",
                );
            }
            self.max_restarts = *m.get_ref();
        }
        let must_be_on = |key: &str, spec: &Spanned<DurationSpec>, diags: &mut Diagnostics| match spec.get_ref().0 {
            Some(d) => Some(d),
            None => {
                diags.error_at(source, spec.span(), format!("{key} cannot be \"off\"; give a duration such as \"1s\""));
                None
            }
        };
        if let Some(w) = keys.window
            && let Some(d) = must_be_on("restart_window", w, diags)
        {
            if d.is_zero() {
                diags.error_at(source, w.span(), "restart_window must be longer than zero");
            }
            self.window = d;
        }
        if let Some(b) = keys.backoff
            && let Some(d) = must_be_on("restart_backoff", b, diags)
        {
            self.backoff = d;
        }
        if let Some(s) = keys.stall_timeout {
            if s.get_ref().0.is_some_and(|d| d.is_zero()) {
                diags.error_at(source, s.span(), "stall_timeout must be longer than zero (or \"off\")");
            }
            self.stall_timeout = s.get_ref().0;
        }
        self
    }

    /// The wait before restart number `n` (1-based) within the window: the backoff, doubled
    /// for each earlier one, at most a minute.
    pub fn backoff_before(&self, n: u32) -> Duration {
        let doubled = self.backoff.saturating_mul(1u32 << n.saturating_sub(1).min(16));
        doubled.min(Duration::from_secs(60))
    }
}
