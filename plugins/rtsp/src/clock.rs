//! Frame stamps on the host's clock. A camera's RTP timestamps are its capture clock, smooth
//! but of an unknown origin; arrivals are on the host's clock but jitter with the network.
//! `arrival` (the default) keeps the camera's spacing and puts it on the host's clock at the
//! least delayed arrival seen (a frame's stamp is never after its arrival), letting it creep
//! by 100 ppm so two crystals' drift is followed. `sender` uses the camera's own wall clock from
//! its RTCP sender reports (meaningful when the camera's clock is synchronised with the host's,
//! e.g. by NTP), and the arrival mapping until the first report comes. Stamps only rise, across
//! reconnections too.

/// How the drift between the camera's clock and the host's is followed: this much per unit of
/// stream time.
const CREEP: f64 = 100e-6;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockKind {
    Arrival,
    Sender,
}

/// Maps one connection's media times onto the host's clock.
#[derive(Debug)]
pub struct Clock {
    kind: ClockKind,
    /// stamp = media + offset (ns), for the connection under way.
    offset: Option<i128>,
    last_media: i128,
    /// The last sender report: its media time and the camera's wall clock then (ns since the
    /// Unix epoch).
    report: Option<(i128, i128)>,
    last_stamp: u64,
}

impl Clock {
    pub fn new(kind: ClockKind) -> Clock {
        Clock { kind, offset: None, last_media: 0, report: None, last_stamp: 0 }
    }

    /// A new connection: its media times start again.
    pub fn restart(&mut self) {
        self.offset = None;
        self.report = None;
    }

    /// A sender report: at media time `media_ns` the camera's wall clock read `wall_ns`.
    pub fn sender_report(&mut self, media_ns: i128, wall_ns: i128) {
        self.report = Some((media_ns, wall_ns));
    }

    /// The stamp of a frame at media time `media_ns` (this connection's) that arrived at
    /// `arrival_ns`.
    pub fn stamp(&mut self, media_ns: i128, arrival_ns: u64) -> u64 {
        let seen = i128::from(arrival_ns) - media_ns;
        let offset = match self.offset {
            None => seen,
            Some(o) => {
                let crept = o + ((media_ns - self.last_media).max(0) as f64 * CREEP) as i128;
                crept.min(seen)
            }
        };
        self.offset = Some(offset);
        self.last_media = media_ns;
        let stamp = match (self.kind, self.report) {
            (ClockKind::Sender, Some((at, wall))) => wall + (media_ns - at),
            _ => media_ns + offset,
        };
        let stamp = u64::try_from(stamp.max(0)).unwrap_or(u64::MAX).max(self.last_stamp + 1);
        self.last_stamp = stamp;
        stamp
    }
}

/// An NTP timestamp (seconds since 1900 in the high 32 bits, a fraction in the low) in ns since
/// the Unix epoch.
pub fn ntp_to_unix_ns(ntp: u64) -> i128 {
    const UNIX_EPOCH_IN_NTP: i128 = 2_208_988_800;
    let secs = i128::from(ntp >> 32) - UNIX_EPOCH_IN_NTP;
    let frac = (i128::from(ntp & 0xffff_ffff) * 1_000_000_000) >> 32;
    secs * 1_000_000_000 + frac
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_keep_the_cameras_spacing_at_the_least_delayed_arrival() {
        let mut c = Clock::new(ClockKind::Arrival);
        let ms = 1_000_000;
        // Frames 33 ms apart arriving with jitter: the second arrived least late.
        assert_eq!(c.stamp(0, 1_000 * ms), 1_000 * ms);
        assert_eq!(c.stamp(33 * i128::from(ms), 1_030 * ms), 1_030 * ms);
        let third = c.stamp(66 * i128::from(ms), 1_080 * ms);
        assert!(third >= 1_063 * ms && third < 1_064 * ms, "{third}");
        // A new connection's media times start at 0 again; stamps still rise.
        c.restart();
        let after = c.stamp(0, 1_050 * ms);
        assert!(after > third);
    }

    #[test]
    fn sender_reports_give_the_cameras_wall_clock() {
        let mut c = Clock::new(ClockKind::Sender);
        c.sender_report(0, 5_000_000_000);
        assert_eq!(c.stamp(40_000_000, 9_000_000_000), 5_040_000_000);
        assert_eq!(ntp_to_unix_ns(2_208_988_801u64 << 32 | 0x8000_0000), 1_500_000_000);
    }
}
