//! sky-env: the one place skyctl's crates read an environment variable, and [`Secret`], the
//! type a secret value travels in.
//!
//! Every variable goes through [`Var`]: [`Var::get`] takes the raw value (any bytes, or
//! unset), and one method says what the value must be: [`Var::text`] (UTF-8, may be empty),
//! [`Var::value`] (UTF-8, not blank), [`Var::path`] (any bytes, not blank), [`Var::flag`]
//! (`1`/`0`), [`Var::parse`] (a value a function accepts), [`Var::secret`] (not blank, held in
//! a [`Secret`]), or [`Var::os`] (passed through as it is: `PATH`, `HOME`). The rule they all
//! keep: **only unset means unset**. A variable that is set but cannot be used (not UTF-8,
//! blank where a value is needed, out of range) is an [`EnvError`] naming the variable (and
//! never the value of a secret), which the command line turns into exit 2; it is never read as
//! if it were unset, so a setting that guards the cache (a signing key, read-only mode) is
//! never silently dropped.
//!
//! ```
//! use sky_env::Var;
//! let v = Var::from_raw("SKYCTL_REMOTE_CACHE_READ_ONLY", Some("1".into()));
//! assert_eq!(v.flag(), Ok(Some(true)));
//! let blank = Var::from_raw("SKYCTL_REMOTE_CACHE_SIGNING_KEY", Some(" ".repeat(17).into()));
//! let e = blank.secret("a key of 16 bytes or more").unwrap_err();
//! assert_eq!(e.to_string(), "SKYCTL_REMOTE_CACHE_SIGNING_KEY is set but blank: it must be \
//!     a key of 16 bytes or more (or unset)");
//! ```

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;

/// A secret value (an auth header, a signing key, URL credentials). It has no `Display` and no
/// `Serialize`, and its `Debug` prints `[redacted]`, so it cannot reach a message, a log, a
/// key or a state file by accident; [`Secret::expose`] is the one, greppable, way to the value.
///
/// ```
/// let s = sky_env::Secret::new("hunter2".to_string());
/// assert_eq!(format!("{s:?}"), "[redacted]");
/// assert_eq!(s.expose(), "hunter2");
/// ```
///
/// It cannot be formatted for people:
///
/// ```compile_fail
/// let s = sky_env::Secret::new("hunter2".to_string());
/// let _ = format!("{}", s);
/// ```
///
/// Nor compared: it has no `PartialEq` (a comparison that stops at the first differing byte
/// tells a timer how much of a guess was right).
#[derive(Clone)]
pub struct Secret<T>(T);

impl<T> Secret<T> {
    /// Hold `value` as a secret.
    pub fn new(value: T) -> Secret<T> {
        Secret(value)
    }

    /// The value itself, for the one place that must use it (a request header, an HMAC).
    pub fn expose(&self) -> &T {
        &self.0
    }

    /// A secret made from this one's value (`Secret<String>` into a parsed header value).
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Secret<U> {
        Secret(f(self.0))
    }
}

impl<T> fmt::Debug for Secret<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

/// Why a set variable cannot be used. Its message names the variable and what it must be;
/// the value only for a variable that is not a secret and is valid text.
#[derive(Clone, PartialEq, Eq)]
pub struct EnvError {
    name: String,
    expected: String,
    problem: Problem,
}

#[derive(Clone, PartialEq, Eq)]
enum Problem {
    /// Set, but not UTF-8.
    NotUnicode,
    /// Set, but empty or only white space where a value is needed.
    Blank,
    /// Set to text that is not an accepted value (shown unless it is a secret).
    Invalid(Option<String>),
}

impl EnvError {
    /// The variable's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl fmt::Display for EnvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (name, expected) = (&self.name, &self.expected);
        match &self.problem {
            Problem::NotUnicode => write!(
                f,
                "{name} is set but is not UTF-8 text: it must be {expected} (or unset)"
            ),
            Problem::Blank => write!(
                f,
                "{name} is set but blank: it must be {expected} (or unset)"
            ),
            Problem::Invalid(Some(v)) => write!(f, "{name} must be {expected}, not `{v}`"),
            Problem::Invalid(None) => write!(f, "{name} must be {expected}"),
        }
    }
}

// Debug as Display: the value of a secret never reaches either.
impl fmt::Debug for EnvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl std::error::Error for EnvError {}

/// One environment variable, read once: its name and its raw value (`None`: unset).
pub struct Var<'a> {
    name: &'a str,
    raw: Option<OsString>,
}

impl<'a> Var<'a> {
    /// The variable `name` of this process.
    pub fn get(name: &'a str) -> Var<'a> {
        Var {
            name,
            // The one read of the environment in skyctl's crates
            // (skyctl/tests/env_and_secrets.rs checks that it is).
            raw: std::env::var_os(name),
        }
    }

    /// A variable with a given raw value (tests, and callers that read it elsewhere).
    pub fn from_raw(name: &'a str, raw: Option<OsString>) -> Var<'a> {
        Var { name, raw }
    }

    fn error(&self, expected: &str, problem: Problem) -> EnvError {
        EnvError {
            name: self.name.to_string(),
            expected: expected.to_string(),
            problem,
        }
    }

    /// Whether it is set (to anything, even empty).
    pub fn is_set(&self) -> bool {
        self.raw.is_some()
    }

    /// The raw value, any bytes (for what is passed through untouched: `PATH`, `HOME`).
    pub fn os(self) -> Option<OsString> {
        self.raw
    }

    /// UTF-8 text, which may be empty (a node's declared variable). `expected` says what
    /// it must be, for the error.
    pub fn text(self, expected: &str) -> Result<Option<String>, EnvError> {
        match self.raw {
            None => Ok(None),
            Some(ref raw) => match raw.to_str() {
                Some(s) => Ok(Some(s.to_string())),
                None => Err(self.error(expected, Problem::NotUnicode)),
            },
        }
    }

    /// UTF-8 text that is not blank, trimmed.
    pub fn value(self, expected: &str) -> Result<Option<String>, EnvError> {
        let name = self.name;
        let e = |p| EnvError {
            name: name.to_string(),
            expected: expected.to_string(),
            problem: p,
        };
        match self.text(expected)? {
            None => Ok(None),
            Some(s) if s.trim().is_empty() => Err(e(Problem::Blank)),
            Some(s) => Ok(Some(s.trim().to_string())),
        }
    }

    /// A path (any bytes) that is not blank.
    pub fn path(self, expected: &str) -> Result<Option<PathBuf>, EnvError> {
        match &self.raw {
            None => Ok(None),
            Some(raw) if raw.to_str().is_some_and(|s| s.trim().is_empty()) => {
                Err(self.error(expected, Problem::Blank))
            }
            Some(raw) => Ok(Some(PathBuf::from(raw))),
        }
    }

    /// A value `parse` accepts (`None` from it: not accepted; the error shows the value).
    pub fn parse<T>(
        self,
        expected: &str,
        parse: impl FnOnce(&str) -> Option<T>,
    ) -> Result<Option<T>, EnvError> {
        let name = self.name;
        match self.value(expected)? {
            None => Ok(None),
            Some(v) => match parse(&v) {
                Some(t) => Ok(Some(t)),
                None => Err(EnvError {
                    name: name.to_string(),
                    expected: expected.to_string(),
                    problem: Problem::Invalid(Some(v)),
                }),
            },
        }
    }

    /// `1`, `true`, `yes`, `on` or `0`, `false`, `no`, `off` (any case).
    pub fn flag(self) -> Result<Option<bool>, EnvError> {
        self.parse("1 or 0", |v| match v.to_ascii_lowercase().as_str() {
            "1" | "true" | "yes" | "on" => Some(true),
            "0" | "false" | "no" | "off" => Some(false),
            _ => None,
        })
    }

    /// A secret: UTF-8, not blank, kept exactly as given (no trimming: a key's bytes are the
    /// key). No error ever shows it.
    pub fn secret(self, expected: &str) -> Result<Option<Secret<String>>, EnvError> {
        let name = self.name;
        match self.text(expected)? {
            None => Ok(None),
            Some(s) if s.trim().is_empty() => Err(EnvError {
                name: name.to_string(),
                expected: expected.to_string(),
                problem: Problem::Blank,
            }),
            Some(s) => Ok(Some(Secret(s))),
        }
    }

    /// A secret that must also pass `check` (`false`: refused; the error never shows it).
    pub fn secret_checked(
        self,
        expected: &str,
        check: impl FnOnce(&str) -> bool,
    ) -> Result<Option<Secret<String>>, EnvError> {
        let name = self.name;
        match self.secret(expected)? {
            Some(s) if !check(s.expose()) => Err(EnvError {
                name: name.to_string(),
                expected: expected.to_string(),
                problem: Problem::Invalid(None),
            }),
            other => Ok(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStringExt;

    fn var(raw: Option<&[u8]>) -> Var<'static> {
        Var::from_raw("V", raw.map(|b| OsString::from_vec(b.to_vec())))
    }

    #[test]
    fn only_unset_means_unset() {
        assert_eq!(var(None).text("x"), Ok(None));
        assert_eq!(var(None).value("x"), Ok(None));
        assert_eq!(var(None).flag(), Ok(None));
        assert_eq!(var(None).secret("x").map(|s| s.is_some()), Ok(false));
        assert_eq!(var(Some(b"")).text("x"), Ok(Some(String::new())));
        for blank in [&b""[..], b"   ", b"\t\n", &[b' '; 17]] {
            let e = var(Some(blank)).value("a value").unwrap_err();
            assert_eq!(
                e.to_string(),
                "V is set but blank: it must be a value (or unset)"
            );
            assert!(var(Some(blank)).secret("a key").is_err());
            assert!(var(Some(blank)).flag().is_err());
            assert!(var(Some(blank)).path("a folder").is_err());
        }
    }

    #[test]
    fn text_that_is_not_utf8_is_an_error_naming_the_variable_only() {
        let bad = b"yes\xff";
        for e in [
            var(Some(bad)).flag().unwrap_err(),
            var(Some(bad)).text("text").unwrap_err(),
            var(Some(bad)).secret("a key").map(|_| ()).unwrap_err(),
        ] {
            let shown = e.to_string();
            assert!(
                shown.starts_with("V is set but is not UTF-8 text"),
                "{shown}"
            );
            assert!(
                !shown.contains("yes") && !shown.contains('\u{fffd}'),
                "{shown}"
            );
            assert_eq!(e.name(), "V");
        }
        // A path may be any bytes.
        assert!(var(Some(bad)).path("a folder").is_ok_and(|p| p.is_some()));
        assert_eq!(var(Some(bad)).os(), Some(OsString::from_vec(bad.to_vec())));
    }

    #[test]
    fn flags_and_parsed_values() {
        for (raw, want) in [
            ("1", true),
            (" yes ", true),
            ("ON", true),
            ("0", false),
            ("off", false),
        ] {
            assert_eq!(var(Some(raw.as_bytes())).flag(), Ok(Some(want)), "{raw}");
        }
        let e = var(Some(b"maybe")).flag().unwrap_err();
        assert_eq!(e.to_string(), "V must be 1 or 0, not `maybe`");
        let n = var(Some(b" 7 ")).parse("a number", |v| v.parse::<u32>().ok());
        assert_eq!(n, Ok(Some(7)));
    }

    #[test]
    fn a_secret_is_never_shown() {
        let s = var(Some(b"hunter2 hunter2 hunter2"))
            .secret("a key")
            .unwrap()
            .unwrap();
        assert_eq!(format!("{s:?}"), "[redacted]");
        assert_eq!(format!("{:?}", Some(&s)), "Some([redacted])");
        assert_eq!(s.expose(), "hunter2 hunter2 hunter2");
        let e = var(Some(b"hunter2"))
            .secret_checked("16 bytes or more", |k| k.len() >= 16)
            .unwrap_err();
        assert_eq!(e.to_string(), "V must be 16 bytes or more");
        assert!(!format!("{e:?}").contains("hunter2"));
        // Kept exactly: a key's spaces are part of it.
        let k = var(Some(b" key ")).secret("k").unwrap().unwrap();
        assert_eq!(k.expose(), " key ");
    }
}
