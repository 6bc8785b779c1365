//! `docs/config.md`, the reference of every `muster serve` setting (SPEC U3), generated from
//! the config structs themselves so it cannot drift: each key's description is its field's
//! `///` comment, its default is `ServerConfig::default()` as `--print-config` prints it, and
//! its flag is the `serve` flag of the same name. The test fails when the file is out of date;
//! `MUSTER_REGENERATE=1 cargo test -p muster --test cli config_reference` rewrites it.
//!
//! How: the sources in [`SOURCES`] are read as text; every `pub struct Name {` with its
//! `/// doc` and `pub field: Type,` lines is a candidate section, and a field of
//! `ServerConfig` (or of a section) whose type is one of them is a `[section]` of its own.
//! A new section is its struct's file added to [`SOURCES`] (when it is a new file) and its
//! field on `ServerConfig`, then the regeneration above.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use clap::CommandFactory;
use muster_cli::cli::Cli;
use muster_server::ServerConfig;

/// The files that define the config structs, relative to this crate. Add the file of a new
/// section's struct here.
const SOURCES: &[&str] = &[
    "../server/src/config.rs",
    "../gate/src/caller.rs",
    "../http/src/listener.rs",
    "../consul/src/config.rs",
    "../server/src/xds/config.rs",
    "../dns/src/config.rs",
    "../registry/src/config.rs",
    "../core/src/limits.rs",
    "../core/src/address.rs",
    "../federation/src/region.rs",
    "../core/src/federation.rs",
];

/// The arrays of tables (`[[federation.peer]]`): sections of their own, one entry each. An
/// array of a struct that is written as a string (`Cidr`) is an ordinary key.
const ARRAY_SECTIONS: &[&str] = &["federation.peer", "federation.policy"];

/// The map-valued keys of the default configuration (tables that are no section).
const MAP_KEYS: &[&str] = &["health.floors", "peers"];

/// The root of the file: the whole `--config` document.
const ROOT: &str = "ServerConfig";

#[derive(Debug)]
struct Field {
    name: String,
    ty: String,
    doc: String,
}

#[derive(Debug)]
struct Struct {
    doc: String,
    fields: Vec<Field>,
}

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The structs with named fields of one source file, by name.
fn parse(text: &str, structs: &mut BTreeMap<String, Struct>) {
    let mut doc: Vec<String> = Vec::new();
    let mut open: Option<(String, Struct)> = None;
    for line in text.lines() {
        let trimmed = line.trim();
        if let Some(comment) = trimmed.strip_prefix("///") {
            doc.push(comment.strip_prefix(' ').unwrap_or(comment).to_owned());
            continue;
        }
        if trimmed.starts_with("#[") {
            continue;
        }
        match &mut open {
            None => {
                if let Some(rest) = trimmed.strip_prefix("pub struct ")
                    && let Some(name) = rest.strip_suffix(" {")
                {
                    let item = Struct {
                        doc: doc
                            .iter()
                            .filter(|line| !line.is_empty())
                            .cloned()
                            .collect::<Vec<_>>()
                            .join(" "),
                        fields: Vec::new(),
                    };
                    open = Some((name.trim().to_owned(), item));
                }
            }
            Some((name, item)) => {
                if line.starts_with('}') {
                    let (name, item) = (std::mem::take(name), open.take().unwrap().1);
                    structs.insert(name, item);
                } else if let Some(field) = trimmed.strip_prefix("pub ")
                    && let Some((field, ty)) = field.split_once(": ")
                {
                    item.fields.push(Field {
                        name: field.to_owned(),
                        ty: ty.trim_end_matches(',').to_owned(),
                        doc: doc
                            .iter()
                            .filter(|line| !line.is_empty())
                            .cloned()
                            .collect::<Vec<_>>()
                            .join(" "),
                    });
                }
            }
        }
        doc.clear();
    }
}

fn structs() -> BTreeMap<String, Struct> {
    let mut structs = BTreeMap::new();
    for source in SOURCES {
        let path = crate_dir().join(source);
        let text = std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{}: {err}", path.display()));
        parse(&text, &mut structs);
    }
    structs
}

/// `Option<T>` → `T`.
fn unwrap_option(ty: &str) -> &str {
    ty.strip_prefix("Option<")
        .and_then(|inner| inner.strip_suffix('>'))
        .unwrap_or(ty)
}

/// A default as the file spells it; `unset` for an absent optional setting.
fn render_default(value: Option<&toml::Value>) -> String {
    match value {
        None => "unset".to_owned(),
        Some(toml::Value::Table(table)) => {
            let entries: Vec<String> = table.iter().map(|(k, v)| format!("{k} = {v}")).collect();
            format!("{{{}}}", entries.join(", "))
        }
        Some(value) => value.to_string(),
    }
}

fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

/// The `serve` flags by the config key they set: `--tls-client-ca` sets `tls.client_ca`,
/// read as `tls_client_ca`.
fn flags() -> BTreeMap<String, String> {
    let cli = Cli::command();
    let serve = cli.find_subcommand("serve").expect("the serve subcommand");
    serve
        .get_arguments()
        .filter_map(|arg| {
            let long = arg.get_long()?;
            let env = arg
                .get_env()
                .map(|env| format!(" / `{}`", env.to_string_lossy()))
                .unwrap_or_default();
            Some((long.replace('-', "_"), format!("`--{long}`{env}")))
        })
        .collect()
}

struct Writer<'a> {
    structs: &'a BTreeMap<String, Struct>,
    defaults: &'a toml::Value,
    flags: BTreeMap<String, String>,
    /// The sections that are arrays of tables.
    arrays: Vec<String>,
    out: String,
}

impl Writer<'_> {
    fn section(&mut self, name: &str, path: &[String]) {
        let item = self
            .structs
            .get(name)
            .unwrap_or_else(|| panic!("struct {name} not found in SOURCES"));
        let defaults = path.iter().try_fold(self.defaults, |value, key| value.get(key));
        let title = if path.is_empty() {
            "Top level".to_owned()
        } else if self.arrays.contains(&path.join(".")) {
            format!("`[[{}]]`", path.join("."))
        } else {
            format!("`[{}]`", path.join("."))
        };
        self.out.push_str(&format!("\n## {title}\n\n{}\n\n", item.doc));
        self.out
            .push_str("| key | default | flag / environment | description |\n|---|---|---|---|\n");
        let mut sections = Vec::new();
        for field in &item.fields {
            let ty = unwrap_option(&field.ty);
            assert!(!field.doc.is_empty(), "{name}.{} has no doc comment", field.name);
            if self.structs.contains_key(ty) {
                sections.push((ty.to_owned(), field));
                continue;
            }
            // An array of tables (`[[federation.peer]]`): a section of its own, no defaults.
            let mut key_path = path.to_vec();
            key_path.push(field.name.clone());
            if let Some(inner) = ty.strip_prefix("Vec<").and_then(|t| t.strip_suffix('>'))
                && ARRAY_SECTIONS.contains(&key_path.join(".").as_str())
            {
                assert!(self.structs.contains_key(inner), "{inner} is not in SOURCES");
                self.arrays.push(key_path.join("."));
                sections.push((inner.to_owned(), field));
                continue;
            }
            let default = defaults.and_then(|table| table.get(&field.name));
            // A table default on a field that is not a map is a struct this test did not
            // read: its file is missing from SOURCES.
            let is_map = ty.starts_with("BTreeMap<") || ty.starts_with("HashMap<");
            assert!(
                is_map || !matches!(default, Some(toml::Value::Table(_))),
                "{name}.{}: type {ty} is a section whose struct is not in SOURCES; add its file",
                field.name
            );
            let mut key_path = path.to_vec();
            key_path.push(field.name.clone());
            let flag = self.flags.get(&key_path.join("_")).cloned().unwrap_or_default();
            // An array of tables has no default entry: its description says what a key
            // defaults to.
            let default = if self.arrays.contains(&path.join(".")) {
                "-".to_owned()
            } else {
                format!("`{}`", cell(&render_default(default)))
            };
            self.out.push_str(&format!(
                "| `{}` | {default} | {flag} | {} |\n",
                field.name,
                cell(&field.doc)
            ));
        }
        for (ty, field) in sections {
            let mut sub = path.to_vec();
            sub.push(field.name.clone());
            self.section(&ty, &sub);
        }
    }
}

/// The reference as it should be.
fn generate() -> String {
    let structs = structs();
    let defaults = toml::Value::try_from(ServerConfig::default()).expect("the defaults as TOML");
    let mut writer = Writer {
        structs: &structs,
        defaults: &defaults,
        flags: flags(),
        arrays: Vec::new(),
        out: String::new(),
    };
    writer.out.push_str(
        "# Configuration reference\n\n\
         Every setting of `muster serve`, generated from the config structs' doc comments and \
         `ServerConfig::default()` by `crates/muster/tests/cli/config_reference.rs` — do not edit \
         by hand; after changing a setting run \
         `MUSTER_REGENERATE=1 cargo test -p muster --test cli config_reference`.\n\n\
         Settings come from the defaults, then the TOML file given with `--config` (unknown keys \
         are refused), then the flags (a flag wins; its environment variable stands in for it). \
         `muster serve --print-config` prints the merged result as TOML, a valid `--config` file. \
         Durations are in milliseconds (`_ms`) or seconds (`_s`) as the key says. Logging is not \
         a setting of the file: `--log-level`, `--log-format` and `MUSTER_LOG` (see `muster --help`).\n",
    );
    writer.section(ROOT, &[]);
    writer.out
}

fn reference_path() -> PathBuf {
    crate_dir().join("../../docs/config.md")
}

/// SPEC U3: `docs/config.md` is what the structs say today.
#[test]
fn config_reference_is_up_to_date() {
    let generated = generate();
    let path = reference_path();
    if std::env::var_os("MUSTER_REGENERATE").is_some() {
        std::fs::write(&path, &generated).unwrap();
        return;
    }
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        on_disk == generated,
        "{} is out of date with the config structs: run `MUSTER_REGENERATE=1 cargo test -p muster --test cli config_reference` and commit it",
        Path::new("docs/config.md").display()
    );
}

/// Every key the defaults print is in the reference (the parser missed no field), and a few
/// known rows read as they should.
#[test]
fn config_reference_lists_every_default_key() {
    let generated = generate();
    fn keys(value: &toml::Value, path: &str, generated: &str, out: &mut Vec<String>) {
        if let toml::Value::Table(table) = value {
            for (key, value) in table {
                let full = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                match value {
                    // A section; any other table is a map-valued key (`peers`, `floors`).
                    toml::Value::Table(_) if generated.contains(&format!("## `[{full}]`")) => {
                        keys(value, &full, generated, out)
                    }
                    // A table that is no section must be a map-valued key; anything else is a
                    // section whose struct the reference does not know (its file is missing
                    // from `SOURCES`), which would otherwise pass as one opaque key.
                    toml::Value::Table(_) => {
                        assert!(
                            MAP_KEYS.contains(&full.as_str()),
                            "`{full}` is a table but no section of the reference: add its struct's \
                             file to SOURCES (or, if it is a map, to MAP_KEYS) and regenerate"
                        );
                        out.push(full);
                    }
                    _ => out.push(full),
                }
            }
        }
    }
    let mut all = Vec::new();
    keys(
        &toml::Value::try_from(ServerConfig::default()).unwrap(),
        "",
        &generated,
        &mut all,
    );
    assert!(all.len() > 50, "{all:?}");
    for key in all {
        // An array of tables is a section of its own (`[[federation.peer]]`).
        if ARRAY_SECTIONS.contains(&key.as_str()) {
            assert!(generated.contains(&format!("## `[[{key}]]`")), "no [[{key}]] section");
            continue;
        }
        let (section, name) = key.rsplit_once('.').unwrap_or(("", &key));
        let heading = if section.is_empty() {
            "## Top level".to_owned()
        } else {
            format!("## `[{section}]`")
        };
        let start = generated.find(&heading).unwrap_or_else(|| panic!("no {heading}"));
        let body = &generated[start + heading.len()..];
        let body = &body[..body.find("\n## ").unwrap_or(body.len())];
        assert!(body.contains(&format!("| `{name}` |")), "{key} missing under {heading}");
    }
    assert!(
        generated.contains("| `http` | `\"127.0.0.1:7070\"` | `--http` / `MUSTER_HTTP` | The HTTP API's address."),
        "{generated}"
    );
    assert!(
        generated.contains("| `cluster_addr` | `unset` | `--cluster-addr`"),
        "{generated}"
    );
}

/// Every secret-bearing setting of every section is a `muster_core::Secret`, whose printing
/// and serialisation redact (SPEC S4): a setting named for a secret, a token or a password
/// (but not one naming the file that holds it) with another type would print in full in
/// `--print-config`, which is pasted into tickets.
#[test]
fn every_secret_setting_is_a_redacting_secret() {
    let mut seen = 0;
    for (name, section) in structs() {
        for field in &section.fields {
            let named_secret = ["secret", "token", "password"]
                .iter()
                .any(|word| field.name.contains(word));
            if !named_secret || field.name.ends_with("_file") {
                continue;
            }
            seen += 1;
            let ty = unwrap_option(&field.ty);
            assert!(
                ty == "Secret" || ty.ends_with("::Secret"),
                "{name}.{}: a secret-bearing setting of type {} (make it a muster_core::Secret)",
                field.name,
                field.ty
            );
        }
    }
    // The cluster secret and a federation peer's token, at least: the walk saw the sections.
    assert!(seen >= 2, "only {seen} secret settings found: is SOURCES complete?");
}
