//! hvsim's guest SDK for Rust.
//!
//! Assertions and lifecycle events for programs tested under hvsim, written
//! as JSON lines in the shapes the Antithesis SDKs use (docs/sdk-protocol.md)
//! to `$HVSIM_SDK_OUTPUT` (under hvsim, `/run/hvsim/sdk`: a file of the
//! guest kernel, where every line written is one message to the VMM), else
//! `$ANTITHESIS_SDK_LOCAL_OUTPUT`, else nowhere.
//!
//! ```ignore
//! hvsim_sdk::init(); // registers every assertion in the program
//! hvsim_sdk::setup_complete(&serde_json::json!({"nodes": 3}));
//! hvsim_sdk::assert_always!(balance >= 0, "balance never negative");
//! hvsim_sdk::assert_sometimes!(retried, "a request is sometimes retried");
//! ```
//!
//! Every macro site is registered at [`init`] (through a link-time catalog),
//! so assertions that are never reached still appear in hvsim's report.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::sync::Mutex;

use serde_json::{json, Value};

#[doc(hidden)]
pub use linkme;
#[doc(hidden)]
pub use serde_json;

/// The assertion kinds (`display_type` in the protocol).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Always,
    AlwaysOrUnreachable,
    Sometimes,
    Reachable,
    Unreachable,
    AlwaysGreaterThan,
    AlwaysGreaterThanOrEqualTo,
    AlwaysLessThan,
    AlwaysLessThanOrEqualTo,
    SometimesGreaterThan,
    SometimesGreaterThanOrEqualTo,
    SometimesLessThan,
    SometimesLessThanOrEqualTo,
    SometimesAll,
}

impl Kind {
    fn display(self) -> &'static str {
        match self {
            Kind::Always => "Always",
            Kind::AlwaysOrUnreachable => "AlwaysOrUnreachable",
            Kind::Sometimes => "Sometimes",
            Kind::Reachable => "Reachable",
            Kind::Unreachable => "Unreachable",
            Kind::AlwaysGreaterThan => "AlwaysGreaterThan",
            Kind::AlwaysGreaterThanOrEqualTo => "AlwaysGreaterThanOrEqualTo",
            Kind::AlwaysLessThan => "AlwaysLessThan",
            Kind::AlwaysLessThanOrEqualTo => "AlwaysLessThanOrEqualTo",
            Kind::SometimesGreaterThan => "SometimesGreaterThan",
            Kind::SometimesGreaterThanOrEqualTo => "SometimesGreaterThanOrEqualTo",
            Kind::SometimesLessThan => "SometimesLessThan",
            Kind::SometimesLessThanOrEqualTo => "SometimesLessThanOrEqualTo",
            Kind::SometimesAll => "SometimesAll",
        }
    }

    fn assert_type(self) -> &'static str {
        match self {
            Kind::Reachable | Kind::Unreachable => "reachability",
            Kind::Always
            | Kind::AlwaysOrUnreachable
            | Kind::AlwaysGreaterThan
            | Kind::AlwaysGreaterThanOrEqualTo
            | Kind::AlwaysLessThan
            | Kind::AlwaysLessThanOrEqualTo => "always",
            _ => "sometimes",
        }
    }

    fn must_hit(self) -> bool {
        !matches!(self, Kind::AlwaysOrUnreachable | Kind::Unreachable)
    }

    /// For numeric kinds: whether the explorer should push `left - right` up.
    fn maximize(self) -> bool {
        matches!(
            self,
            Kind::AlwaysLessThan
                | Kind::AlwaysLessThanOrEqualTo
                | Kind::SometimesGreaterThan
                | Kind::SometimesGreaterThanOrEqualTo
        )
    }
}

/// One assertion site in the program (what a macro registers).
#[derive(Debug)]
pub struct Site {
    pub kind: Kind,
    pub message: &'static str,
    pub file: &'static str,
    pub function: &'static str,
    pub line: u32,
    pub column: u32,
}

/// Every assertion site of the program, collected at link time.
#[linkme::distributed_slice]
pub static CATALOG: [Site];

static OUTPUT: Mutex<Option<Option<File>>> = Mutex::new(None);

fn open_output() -> Option<File> {
    let path = std::env::var_os("HVSIM_SDK_OUTPUT").or_else(|| std::env::var_os("ANTITHESIS_SDK_LOCAL_OUTPUT"))?;
    OpenOptions::new().append(true).create(true).open(path).ok()
}

/// Writes one protocol line (one `write` call, so lines never interleave).
pub fn emit(value: &Value) {
    let mut line = value.to_string();
    line.push('\n');
    let mut out = OUTPUT.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(file) = out.get_or_insert_with(open_output) {
        let _ = file.write_all(line.as_bytes());
    }
}

/// Sends output to `path` instead of the environment's choice (for tests).
pub fn set_output(path: &std::path::Path) -> std::io::Result<()> {
    let file = OpenOptions::new().append(true).create(true).open(path)?;
    *OUTPUT.lock().unwrap_or_else(|p| p.into_inner()) = Some(Some(file));
    Ok(())
}

fn assertion(site: &Site, hit: bool, condition: bool, details: &Value) -> Value {
    json!({"antithesis_assert": {
        "id": site.message,
        "message": site.message,
        "condition": condition,
        "hit": hit,
        "must_hit": site.kind.must_hit(),
        "assert_type": site.kind.assert_type(),
        "display_type": site.kind.display(),
        "location": {
            "class": "",
            "function": site.function,
            "file": site.file,
            "begin_line": site.line,
            "begin_column": site.column,
        },
        "details": details,
    }})
}

/// Announces the SDK and registers every assertion site (call once, early).
pub fn init() {
    emit(&json!({"antithesis_sdk": {
        "language": {"name": "Rust", "version": ""},
        "sdk_version": env!("CARGO_PKG_VERSION"),
        "protocol_version": "1.0.0",
    }}));
    for site in CATALOG.iter() {
        emit(&assertion(site, false, false, &Value::Null));
    }
}

#[doc(hidden)]
pub fn hit(site: &Site, condition: bool, details: &Value) {
    emit(&assertion(site, true, condition, details));
}

#[doc(hidden)]
pub fn hit_numeric(site: &Site, left: f64, right: f64, details: &Value) {
    let condition = match site.kind {
        Kind::AlwaysGreaterThan | Kind::SometimesGreaterThan => left > right,
        Kind::AlwaysGreaterThanOrEqualTo | Kind::SometimesGreaterThanOrEqualTo => left >= right,
        Kind::AlwaysLessThan | Kind::SometimesLessThan => left < right,
        _ => left <= right,
    };
    emit(&json!({"antithesis_guidance": {
        "guidance_type": "numeric",
        "id": site.message,
        "message": site.message,
        "maximize": site.kind.maximize(),
        "guidance_data": {"left": left, "right": right},
        "hit": true,
    }}));
    let mut d = details.clone();
    if let Value::Object(m) = &mut d {
        m.insert("left".into(), json!(left));
        m.insert("right".into(), json!(right));
    } else {
        d = json!({"left": left, "right": right, "details": details});
    }
    hit(site, condition, &d);
}

#[doc(hidden)]
pub fn hit_all(site: &Site, named: &[(&str, bool)], details: &Value) {
    let bools: serde_json::Map<String, Value> = named.iter().map(|(k, v)| ((*k).to_owned(), json!(v))).collect();
    emit(&json!({"antithesis_guidance": {
        "guidance_type": "boolean",
        "id": site.message,
        "message": site.message,
        "maximize": true,
        "guidance_data": bools,
        "hit": true,
    }}));
    hit(site, named.iter().all(|(_, v)| *v), details);
}

/// The system is ready: hvsim's explorer takes its root snapshot here.
pub fn setup_complete(details: &Value) {
    emit(&json!({"antithesis_setup": {"status": "complete", "details": details}}));
}

/// Pauses every fault for `seconds` of virtual time (the network heals,
/// crashed nodes come back; what `$ANTITHESIS_STOP_FAULTS SECONDS` does).
pub fn stop_faults(seconds: f64) {
    emit(&json!({"hvsim_faults": {"pause": seconds}}));
}

/// A named event with details, counted in the report.
pub fn send_event(name: &str, details: &Value) {
    emit(&json!({ name: details }));
}

/// Reports edges of a coverage map (hvsim extension): new edges guide the
/// explorer like new assertion states do.
pub fn coverage(edges: &[u64]) {
    emit(&json!({"hvsim_coverage": {"edges": edges}}));
}

/// A random u64 from the run's seeded stream (under hvsim: /dev/hvsim),
/// else from the operating system. Under hvsim the draw is announced first
/// (`{"hvsim_draw": ...}`): the explorer may snapshot there and choose the
/// value in later branches (docs/sdk-protocol.md).
pub fn get_random() -> u64 {
    draw(None)
}

/// A draw the caller makes `options` outcomes of, if known.
fn draw(options: Option<usize>) -> u64 {
    let msg = match options {
        Some(n) => json!({"hvsim_draw": {"options": n}}),
        None => json!({"hvsim_draw": {}}),
    };
    if let Some(v) = ask(&msg) {
        return v;
    }
    let mut b = [0u8; 8];
    if File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut b)).is_ok() {
        return u64::from_le_bytes(b);
    }
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    t.as_nanos() as u64
}

/// Sends `msg` on /dev/hvsim and reads its 8-byte answer (a draw's value,
/// a buggify verdict); `None` outside hvsim.
fn ask(msg: &Value) -> Option<u64> {
    let mut f = OpenOptions::new().read(true).write(true).open("/dev/hvsim").ok()?;
    f.write_all(msg.to_string().as_bytes()).ok()?;
    let mut b = [0u8; 8];
    f.read_exact(&mut b).ok()?;
    Some(u64::from_le_bytes(b))
}

/// Buggify (FoundationDB's BUGGIFY, docs/faults.md#buggify): whether the
/// site `name` misbehaves now. In each timeline a site is enabled or not
/// (1 in 4), decided by hvsim the first time the timeline reaches it after
/// setup complete, the same for every process; an enabled site fires 1
/// time in 4 it is reached. Never fires outside hvsim or before setup
/// complete.
pub fn buggify(name: &str) -> bool {
    ask(&json!({"hvsim_buggify": {"name": name}})).is_some_and(|v| v != 0)
}

/// One of `items`, chosen with [`get_random`].
pub fn random_choice<T>(items: &[T]) -> Option<&T> {
    (!items.is_empty()).then(|| &items[(draw(Some(items.len())) % items.len() as u64) as usize])
}

#[doc(hidden)]
#[macro_export]
macro_rules! __site {
    ($kind:ident, $msg:expr) => {{
        #[$crate::linkme::distributed_slice($crate::CATALOG)]
        #[linkme(crate = $crate::linkme)]
        static SITE: $crate::Site = $crate::Site {
            kind: $crate::Kind::$kind,
            message: $msg,
            file: file!(),
            function: module_path!(),
            line: line!(),
            column: column!(),
        };
        &SITE
    }};
}

#[doc(hidden)]
#[macro_export]
macro_rules! __bool_assert {
    ($kind:ident, $cond:expr, $msg:expr $(, $details:expr)?) => {
        $crate::hit($crate::__site!($kind, $msg), $cond, &$crate::__details!($($details)?))
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __details {
    () => {
        $crate::serde_json::Value::Null
    };
    ($d:expr) => {
        $crate::serde_json::to_value($d).unwrap_or($crate::serde_json::Value::Null)
    };
}

/// Every time it is reached, `cond` holds; and it must be reached.
#[macro_export]
macro_rules! assert_always { ($($t:tt)*) => { $crate::__bool_assert!(Always, $($t)*) }; }
/// Every time it is reached, `cond` holds (it may never be reached).
#[macro_export]
macro_rules! assert_always_or_unreachable { ($($t:tt)*) => { $crate::__bool_assert!(AlwaysOrUnreachable, $($t)*) }; }
/// At least once, `cond` holds.
#[macro_export]
macro_rules! assert_sometimes { ($($t:tt)*) => { $crate::__bool_assert!(Sometimes, $($t)*) }; }
/// This point is reached at least once.
#[macro_export]
macro_rules! assert_reachable {
    ($msg:expr $(, $details:expr)?) => { $crate::hit($crate::__site!(Reachable, $msg), true, &$crate::__details!($($details)?)) };
}
/// This point is never reached.
#[macro_export]
macro_rules! assert_unreachable {
    ($msg:expr $(, $details:expr)?) => { $crate::hit($crate::__site!(Unreachable, $msg), true, &$crate::__details!($($details)?)) };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __numeric {
    ($kind:ident, $left:expr, $right:expr, $msg:expr $(, $details:expr)?) => {
        $crate::hit_numeric($crate::__site!($kind, $msg), ($left) as f64, ($right) as f64, &$crate::__details!($($details)?))
    };
}
#[macro_export]
macro_rules! assert_always_greater_than { ($($t:tt)*) => { $crate::__numeric!(AlwaysGreaterThan, $($t)*) }; }
#[macro_export]
macro_rules! assert_always_greater_than_or_equal_to { ($($t:tt)*) => { $crate::__numeric!(AlwaysGreaterThanOrEqualTo, $($t)*) }; }
#[macro_export]
macro_rules! assert_always_less_than { ($($t:tt)*) => { $crate::__numeric!(AlwaysLessThan, $($t)*) }; }
#[macro_export]
macro_rules! assert_always_less_than_or_equal_to { ($($t:tt)*) => { $crate::__numeric!(AlwaysLessThanOrEqualTo, $($t)*) }; }
#[macro_export]
macro_rules! assert_sometimes_greater_than { ($($t:tt)*) => { $crate::__numeric!(SometimesGreaterThan, $($t)*) }; }
#[macro_export]
macro_rules! assert_sometimes_greater_than_or_equal_to { ($($t:tt)*) => { $crate::__numeric!(SometimesGreaterThanOrEqualTo, $($t)*) }; }
#[macro_export]
macro_rules! assert_sometimes_less_than { ($($t:tt)*) => { $crate::__numeric!(SometimesLessThan, $($t)*) }; }
#[macro_export]
macro_rules! assert_sometimes_less_than_or_equal_to { ($($t:tt)*) => { $crate::__numeric!(SometimesLessThanOrEqualTo, $($t)*) }; }

/// At least once, every one of the named conditions holds at the same time.
#[macro_export]
macro_rules! assert_sometimes_all {
    ($named:expr, $msg:expr $(, $details:expr)?) => {
        $crate::hit_all($crate::__site!(SometimesAll, $msg), $named, &$crate::__details!($($details)?))
    };
}
