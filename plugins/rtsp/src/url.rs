//! A camera's address: parsed and checked at plan time, its credentials taken out (they go to
//! the RTSP client apart, never into a message), and [`redact`], the one function every text
//! that may hold an address passes through before it is logged, reported or returned.

use url::Url;

/// What a `url` param holds: the address without credentials, and the credentials.
#[derive(Clone, PartialEq, Eq)]
pub struct CameraUrl {
    /// No user or password in it: safe to show.
    pub url: Url,
    pub user: Option<String>,
    pub password: Option<String>,
}

impl std::fmt::Debug for CameraUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the password, even in a debug print.
        write!(f, "CameraUrl({}, user: {:?})", self.url, self.user.as_ref().map(|_| "***"))
    }
}

impl CameraUrl {
    /// Parse an `rtsp://[user[:password]@]host[:port]/path` address. Errors show the address
    /// redacted.
    pub fn parse(text: &str) -> Result<CameraUrl, String> {
        let shown = redact(text);
        let mut url = Url::parse(text).map_err(|e| format!("param `url`: `{shown}` is not a URL: {e}"))?;
        if url.scheme() != "rtsp" {
            return Err(format!(
                "param `url`: `{shown}` is a {} URL; the rtsp source reads rtsp:// URLs (RTSP over TCP, RTP over TCP or UDP)",
                url.scheme()
            ));
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(format!("param `url`: `{shown}` names no host"));
        }
        let decode = |s: &str| {
            url::form_urlencoded::parse(format!("x={s}").as_bytes())
                .next()
                .map(|(_, v)| v.into_owned())
                .unwrap_or_default()
        };
        let user = (!url.username().is_empty()).then(|| decode(url.username()));
        let password = url.password().map(decode);
        // Neither can fail on a URL with a host.
        let _ = url.set_username("");
        let _ = url.set_password(None);
        Ok(CameraUrl { url, user, password })
    }
}

/// `text` with the credentials of every URL in it replaced by `***`: `rtsp://admin:secret@cam/`
/// becomes `rtsp://***@cam/`. Used on every address and error text the source shows.
pub fn redact(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (head, tail) = rest.split_at(at + 3);
        out.push_str(head);
        // The authority ends at the path, query, fragment or the first blank or quote.
        let end = tail
            .find(|c: char| matches!(c, '/' | '?' | '#') || c.is_whitespace() || c == '`' || c == '"' || c == '\'')
            .unwrap_or(tail.len());
        let authority = &tail[..end];
        match authority.rfind('@') {
            Some(i) => {
                out.push_str("***");
                out.push_str(&authority[i..]);
            }
            None => out.push_str(authority),
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

/// `text` redacted, and any appearance of `secret` (a password given apart from the URL)
/// replaced too.
pub fn redact_with(text: &str, secret: Option<&str>) -> String {
    let text = redact(text);
    match secret {
        Some(s) if s.len() >= 2 => text.replace(s, "***"),
        _ => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_redacted_wherever_an_address_appears() {
        assert_eq!(redact("rtsp://admin:s3cret@10.0.0.7:554/stream1"), "rtsp://***@10.0.0.7:554/stream1");
        assert_eq!(redact("rtsp://admin@cam/x"), "rtsp://***@cam/x");
        assert_eq!(redact("rtsp://cam.local/live"), "rtsp://cam.local/live");
        assert_eq!(
            redact("cannot connect to rtsp://u:p@a/1 (then rtsp://v:w@b:8554?x=1): refused"),
            "cannot connect to rtsp://***@a/1 (then rtsp://***@b:8554?x=1): refused"
        );
        // An @ in the password, and a URL at the end of the text.
        assert_eq!(redact("at rtsp://u:p@ss@host"), "at rtsp://***@host");
        assert_eq!(redact("no address here"), "no address here");
        assert_eq!(redact_with("401 for user u with pass hunter2", Some("hunter2")), "401 for user u with pass ***");
    }

    #[test]
    fn a_url_is_split_into_an_address_and_credentials() {
        let c = CameraUrl::parse("rtsp://admin:p%40ss@10.0.0.7:8554/cam0").unwrap();
        assert_eq!(c.url.as_str(), "rtsp://10.0.0.7:8554/cam0");
        assert_eq!(c.user.as_deref(), Some("admin"));
        assert_eq!(c.password.as_deref(), Some("p@ss"));
        assert!(!format!("{c:?}").contains("p@ss"));
        let c = CameraUrl::parse("rtsp://cam/x").unwrap();
        assert_eq!((c.user, c.password), (None, None));
    }

    #[test]
    fn bad_urls_are_refused_without_showing_credentials() {
        let e = CameraUrl::parse("http://u:secret@cam/x").unwrap_err();
        assert_eq!(
            e,
            "param `url`: `http://***@cam/x` is a http URL; the rtsp source reads rtsp:// URLs (RTSP over TCP, RTP over TCP or UDP)"
        );
        let e = CameraUrl::parse("not a url").unwrap_err();
        assert!(e.starts_with("param `url`: `not a url` is not a URL: "), "{e}");
        let e = CameraUrl::parse("rtsp://u:secret@[::1/x").unwrap_err();
        assert!(!e.contains("secret"), "{e}");
    }
}
