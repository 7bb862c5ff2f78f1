//! `hvsim schema`: the versioned JSON Schemas of the documents hvsim
//! writes (`hvsim_explorer::schema`): list them, print one, write them all
//! (docs/schemas/ is made so), or check a file against its own.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{anyhow, bail, Context, Result};
use hvsim_explorer::document::{self, Entry, Tag};
use serde_json::Value;

use crate::documents::{self, Listed, SchemaList};
use crate::util;

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("what").args(["name", "list", "write", "check"]).required(true)))]
pub struct Args {
    /// Print this document's schema (`hvsim schema --list` names them).
    name: Option<String>,
    /// List the documents: name, schema and version, what it is.
    #[arg(long)]
    list: bool,
    /// Write every schema to DIR/<name>.json (DIR is created if need be).
    #[arg(long, value_name = "DIR")]
    write: Option<PathBuf>,
    /// Check a document against the schema its `"schema"` field names.
    #[arg(long, value_name = "FILE")]
    check: Option<PathBuf>,
}

/// A schema as printed and written: pretty JSON, one newline at the end.
fn text(e: &Entry) -> String {
    let mut text = serde_json::to_string_pretty((e.schema)().as_value()).expect("schemas serialize");
    text.push('\n');
    text
}

pub fn main(args: Args, json: bool) -> Result<ExitCode> {
    let mut listed: Vec<Listed> = Vec::new();
    if let Some(name) = &args.name {
        let Some(e) = documents::find(name) else {
            let names: Vec<&str> = documents::all().iter().map(|e| e.name).collect();
            bail!("no document named {name:?} (there are: {})", names.join(", "));
        };
        print!("{}", text(&e));
        return Ok(ExitCode::from(util::EXIT_OK));
    } else if let Some(dir) = &args.write {
        if dir.exists() && !dir.is_dir() {
            bail!("--write {}: it is not a directory", dir.display());
        }
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        for e in documents::all() {
            let file = dir.join(format!("{}.json", e.name));
            hvsim_vmm::files::publish(&file, text(&e).as_bytes())
                .with_context(|| format!("cannot write {}", file.display()))?;
            if !json {
                println!("{}: {}", file.display(), e.schema_id);
            }
            listed.push(Listed::of(&e, Some(file)));
        }
    } else if let Some(file) = &args.check {
        let e = check(file)?;
        if !json {
            println!("{}: a valid {} document ({})", file.display(), e.name, e.schema_id);
        }
        listed.push(Listed::of(&e, Some(file.clone())));
    } else {
        for e in documents::all() {
            if !json {
                println!("{:<14} {:<24} {}", e.name, e.schema_id, e.about);
            }
            listed.push(Listed::of(&e, None));
        }
    }
    if json {
        util::print_json(&SchemaList { schema: Tag::new(), documents: listed })?;
    }
    Ok(ExitCode::from(util::EXIT_OK))
}

/// Checks `file` against the schema its `"schema"` field names.
fn check(file: &Path) -> Result<Entry> {
    let path = file.display();
    let text = hvsim_vmm::files::read_text(file).with_context(|| format!("cannot read {path}"))?;
    let value: Value = serde_json::from_str(&text).with_context(|| format!("{path}: not JSON"))?;
    let id = value
        .get("schema")
        .and_then(Value::as_str)
        .ok_or_else(|| anyhow!("{path}: no \"schema\" field names its schema (written before documents did?)"))?;
    let e = documents::all()
        .into_iter()
        .find(|e| e.schema_id == id)
        .ok_or_else(|| anyhow!("{path}: schema {id:?} is not one this hvsim knows (`hvsim schema --list`)"))?;
    document::check_against(e.name, e.schema_id, (e.schema)().as_value(), &value).with_context(|| path.to_string())?;
    Ok(e)
}
