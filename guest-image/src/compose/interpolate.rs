//! Compose's variables: `$VAR`, `${VAR}` and their forms with defaults,
//! alternatives and errors, interpolated into every value of a compose
//! file as the Compose Specification says, and the bare `NAME` entries of
//! `environment` and env files, which take a variable's value.
//!
//! The difference from `docker compose`: the values come only from env
//! files ([`Variables`]: `--env-file`, else the project's `.env`), never
//! from the environment hvsim runs in, and a variable that has no value
//! and no default is an error with its line, not an empty string. A run is
//! a function of its files and seed, never of the shell it was started
//! from.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The variables a compose file may use, and the files they came from
/// (for errors).
#[derive(Clone, Debug, Default)]
pub struct Variables {
    values: BTreeMap<String, String>,
    sources: Vec<PathBuf>,
}

impl Variables {
    /// Variables from env files, in order: a later file's value wins.
    pub fn from_files(files: &[PathBuf]) -> crate::Result<Variables> {
        let mut vars = Variables::default();
        for file in files {
            let text = hvsim_vmm::files::read_text(file).map_err(crate::error::io("reading an env file", file))?;
            for line in env_lines(&text) {
                if let Some((k, v)) = line.split_once('=') {
                    vars.values.insert(k.to_owned(), v.to_owned());
                }
            }
            vars.sources.push(file.clone());
        }
        Ok(vars)
    }

    /// The env files a project's variables come from: those given, or
    /// else `.env` beside the compose file if there is one.
    pub fn files_for(compose: &Path, given: &[PathBuf]) -> Vec<PathBuf> {
        if !given.is_empty() {
            return given.to_vec();
        }
        let dot_env = compose.parent().unwrap_or(Path::new(".")).join(".env");
        if dot_env.is_file() {
            vec![dot_env]
        } else {
            Vec::new()
        }
    }

    #[cfg(test)]
    pub fn of(pairs: &[(&str, &str)]) -> Variables {
        let values = pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        Variables { values, sources: vec![PathBuf::from("test.env")] }
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }

    /// Where the values come from, for an error about one that is not there.
    pub fn source(&self) -> String {
        if self.sources.is_empty() {
            "no env file was given (--env-file) and the project has no .env".into()
        } else {
            let names: Vec<String> = self.sources.iter().map(|p| p.display().to_string()).collect();
            format!("it is not in {}", names.join(", "))
        }
    }

    /// A bare `NAME` (in `environment` or an env file): `NAME=value`.
    pub fn resolve_bare(&self, name: &str) -> Result<String, String> {
        match self.get(name) {
            Some(v) => Ok(format!("{name}={v}")),
            None => Err(format!(
                "`{name}` takes its value from a variable, and {}; hvsim never reads the environment it runs in",
                self.source()
            )),
        }
    }
}

/// The `NAME=VALUE` (or bare `NAME`) lines of an env file: blank lines and
/// `#` comments skipped, `export ` and quotes around a value removed.
pub fn env_lines(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let l = l.strip_prefix("export ").unwrap_or(l);
            match l.split_once('=') {
                Some((k, v)) => {
                    let v = v.trim();
                    let unquoted = v
                        .strip_prefix('"')
                        .and_then(|x| x.strip_suffix('"'))
                        .or_else(|| v.strip_prefix('\'').and_then(|x| x.strip_suffix('\'')))
                        .unwrap_or(v);
                    format!("{}={unquoted}", k.trim())
                }
                None => l.to_owned(),
            }
        })
        .collect()
}

/// `text` with every `$$` made `$` and every variable replaced:
///
/// | form | value |
/// | --- | --- |
/// | `$VAR`, `${VAR}` | VAR's value; an error if it has none |
/// | `${VAR:-default}` | VAR's value unless unset or empty, else `default` |
/// | `${VAR-default}` | VAR's value unless unset, else `default` |
/// | `${VAR:?message}`, `${VAR?message}` | VAR's value, or an error with the message if unset (or empty, with `:`) |
/// | `${VAR:+other}`, `${VAR+other}` | `other` if VAR is set (and not empty, with `:`), else empty |
///
/// Defaults and alternatives are interpolated too. A `$` before anything
/// else (`$(cmd)`, `$1`) stays as it is, as in Compose.
pub fn interpolate(text: &str, vars: &Variables) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(r) = after.strip_prefix('$') {
            out.push('$');
            rest = r;
        } else if let Some(r) = after.strip_prefix('{') {
            let end = closing_brace(r).ok_or_else(|| format!("`${{{r}` has no closing `}}`"))?;
            out.push_str(&braced(&r[..end], vars)?);
            rest = &r[end + 1..];
        } else {
            let n = name_length(after);
            if n == 0 {
                out.push('$');
            } else {
                out.push_str(value(&after[..n], vars)?);
            }
            rest = &after[n..];
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// The length of the variable name at the start of `s` (0: none).
fn name_length(s: &str) -> usize {
    let mut chars = s.char_indices();
    match chars.next() {
        Some((_, c)) if c == '_' || c.is_ascii_alphabetic() => {}
        _ => return 0,
    }
    chars.find(|(_, c)| !(*c == '_' || c.is_ascii_alphanumeric())).map_or(s.len(), |(i, _)| i)
}

/// Where the `}` closing a `${` is in `s` (after it), nested `${...}` in a
/// default included.
fn closing_brace(s: &str) -> Option<usize> {
    let mut depth = 0;
    let bytes = s.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'$' if bytes.get(i + 1) == Some(&b'{') => {
                depth += 1;
                i += 1;
            }
            b'}' if depth == 0 => return Some(i),
            b'}' => depth -= 1,
            _ => {}
        }
        i += 1;
    }
    None
}

fn value<'v>(name: &str, vars: &'v Variables) -> Result<&'v str, String> {
    vars.get(name).ok_or_else(|| {
        format!(
            "variable {name} has no value: {}; give it a value in an env file, a default (${{{name}:-default}}), \
             or write $$ for a literal $",
            vars.source()
        )
    })
}

/// The value of `${inner}`.
fn braced(inner: &str, vars: &Variables) -> Result<String, String> {
    let n = name_length(inner);
    let (name, op) = inner.split_at(n);
    if n == 0 {
        return Err(format!("`${{{inner}}}` does not name a variable"));
    }
    let (colon, op) = match op.strip_prefix(':') {
        Some(o) => (true, o),
        None => (false, op),
    };
    let Some(kind) = op.chars().next() else {
        return if colon {
            Err(format!("`${{{inner}}}` is not a variable form"))
        } else {
            Ok(value(name, vars)?.into())
        };
    };
    let arg = &op[1..];
    let set = vars.get(name).filter(|v| !(colon && v.is_empty()));
    match kind {
        '-' => match set {
            Some(v) => Ok(v.to_owned()),
            None => interpolate(arg, vars),
        },
        '+' => match set {
            Some(_) => interpolate(arg, vars),
            None => Ok(String::new()),
        },
        '?' => match set {
            Some(v) => Ok(v.to_owned()),
            None => Err(format!("variable {name}: {}", if arg.is_empty() { "required" } else { arg })),
        },
        _ => Err(format!("`${{{inner}}}` is not a variable form")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form() {
        let vars = Variables::of(&[("A", "1"), ("EMPTY", ""), ("B_2", "two")]);
        let ok = |text: &str| interpolate(text, &vars).unwrap();
        assert_eq!(ok("x $A ${B_2} y"), "x 1 two y");
        assert_eq!(ok("$$A costs $$5"), "$A costs $5");
        assert_eq!(ok("${UNSET:-d} ${EMPTY:-d} ${EMPTY-d} ${A:-d}"), "d d  1");
        assert_eq!(ok("${UNSET-d} ${UNSET:-${A}x}"), "d 1x");
        assert_eq!(ok("${A:+set} ${EMPTY:+set} ${EMPTY+set} ${UNSET+set}"), "set  set ");
        assert_eq!(ok("${A:?needed} ${EMPTY?needed}"), "1 ");
        // Not a variable: as in Compose, left alone.
        assert_eq!(ok("$(date) $1 $ end$"), "$(date) $1 $ end$");
    }

    #[test]
    fn what_has_no_value_is_an_error_that_says_so() {
        let vars = Variables::of(&[("EMPTY", "")]);
        let err = |text: &str| interpolate(text, &vars).unwrap_err();
        assert!(err("$NOPE").starts_with("variable NOPE has no value: it is not in test.env"), "{}", err("$NOPE"));
        assert!(err("${NOPE}").contains("${NOPE:-default}"));
        assert_eq!(err("${EMPTY:?must be set}"), "variable EMPTY: must be set");
        assert_eq!(err("${NOPE?}"), "variable NOPE: required");
        assert!(err("${A").contains("no closing"));
        assert!(err("${1}").contains("does not name a variable"));
        assert!(err("${A*x}").contains("not a variable form"));
        let none = interpolate("$X", &Variables::default()).unwrap_err();
        assert!(none.contains("no env file was given (--env-file) and the project has no .env"), "{none}");
    }

    #[test]
    fn bare_names_resolve_from_the_variables_only() {
        let vars = Variables::of(&[("HOME", "/from/the/file")]);
        assert_eq!(vars.resolve_bare("HOME").unwrap(), "HOME=/from/the/file");
        // PATH is in hvsim's own environment, never in the container's.
        assert!(std::env::var("PATH").is_ok());
        let e = vars.resolve_bare("PATH").unwrap_err();
        assert!(e.contains("never reads the environment it runs in"), "{e}");
    }

    #[test]
    fn env_files_in_order_later_wins() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a.env"), dir.path().join("b.env"));
        std::fs::write(&a, "# comment\nX=1\nexport Y = \"two words\"\nBARE\n").unwrap();
        std::fs::write(&b, "X='3'\n").unwrap();
        let vars = Variables::from_files(&[a.clone(), b]).unwrap();
        assert_eq!((vars.get("X"), vars.get("Y"), vars.get("BARE")), (Some("3"), Some("two words"), None));
        assert_eq!(env_lines("A=1\n\nexport B = \"two words\"\nC='x'\nD\n"), ["A=1", "B=two words", "C=x", "D"]);
        let compose = dir.path().join("compose.yaml");
        assert!(Variables::files_for(&compose, &[]).is_empty());
        std::fs::write(dir.path().join(".env"), "X=4\n").unwrap();
        assert_eq!(Variables::files_for(&compose, &[]), [dir.path().join(".env")]);
        assert_eq!(Variables::files_for(&compose, std::slice::from_ref(&a)), [a]);
    }
}
