//! `skyctl inspect`: print the metadata and tensor table of a GGUF file, as text (the
//! format of the seed's gguf-inspect) or as one JSON document.

use crate::outcome::Outcome;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;

use anyhow::Context;
use serde_json::{json, Value as Json};
use sky_gguf::{GgufFile, GgufMmap, Value, ValueType};

/// Arguments of `skyctl inspect`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The GGUF file to inspect.
    pub file: PathBuf,
    /// Show at most N items of each array (the total is always shown). JSON output always
    /// holds whole arrays.
    #[arg(long, value_name = "N", default_value_t = 8)]
    pub max_array: usize,
    /// Print one JSON document instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Run `skyctl inspect`.
pub fn run(args: Args) -> anyhow::Result<Outcome> {
    let path = args.file.display().to_string();
    let map = GgufMmap::open(&args.file)?;
    let file = map.parse().with_context(|| path.clone())?;
    let out = if args.json {
        let mut s = serde_json::to_string_pretty(&to_json(&file))?;
        s.push('\n');
        s
    } else {
        render_text(&path, &file, args.max_array)
    };
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(out.as_bytes())
        .and_then(|()| stdout.flush())
    {
        // A closed pipe (`skyctl inspect f | head`) is not an error of ours.
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(Outcome::Success),
    }
}

/// Type as printed: "u32", "string", "array<string>", "array<array<i32>>".
fn type_name(v: &Value) -> String {
    match v {
        Value::Array(a) => match a.items.first() {
            Some(first @ Value::Array(_)) if a.elem_type == ValueType::Array => {
                format!("array<{}>", type_name(first))
            }
            _ => format!("array<{}>", a.elem_type),
        },
        other => other.value_type().name().to_string(),
    }
}

fn render_value(v: &Value, max_array: usize, out: &mut String) {
    match v {
        Value::U8(x) => write!(out, "{x}"),
        Value::I8(x) => write!(out, "{x}"),
        Value::U16(x) => write!(out, "{x}"),
        Value::I16(x) => write!(out, "{x}"),
        Value::U32(x) => write!(out, "{x}"),
        Value::I32(x) => write!(out, "{x}"),
        Value::U64(x) => write!(out, "{x}"),
        Value::I64(x) => write!(out, "{x}"),
        // Debug prints the shortest representation that reads back exactly, with ".0".
        Value::F32(x) => write!(out, "{x:?}"),
        Value::F64(x) => write!(out, "{x:?}"),
        Value::Bool(x) => write!(out, "{x}"),
        Value::String(s) => write!(out, "{s:?}"),
        Value::Array(a) => {
            out.push('[');
            for (i, item) in a.items.iter().take(max_array).enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                render_value(item, max_array, out);
            }
            if a.items.len() > max_array {
                out.push_str(if max_array > 0 { ", ...] " } else { "...] " });
            } else {
                out.push_str("] ");
            }
            let n = a.items.len();
            write!(out, "({n} item{})", if n == 1 { "" } else { "s" })
        }
    }
    .unwrap_or(());
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The text report (the seed's gguf-inspect format).
fn render_text(path: &str, f: &GgufFile<'_>, max_array: usize) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{path}: GGUF v{}, {} bytes, alignment {}\n",
        f.version,
        f.file_len(),
        f.alignment
    );
    let _ = writeln!(
        out,
        "{}:",
        plural(f.metadata.len(), "metadata key", "metadata keys")
    );
    for (k, v) in &f.metadata {
        let _ = write!(out, "  {k} ({}) = ", type_name(v));
        render_value(v, max_array, &mut out);
        out.push('\n');
    }
    let _ = writeln!(
        out,
        "{} (ggml dims, ne[0] = innermost):",
        plural(f.tensors.len(), "tensor", "tensors")
    );
    for t in &f.tensors {
        let dims = format!("{:?}", t.dims);
        let _ = writeln!(
            out,
            "  {:<40} {:<22} {:<6} {:>10} bytes",
            t.name,
            dims,
            t.ty.name(),
            t.n_bytes()
        );
    }
    let _ = writeln!(
        out,
        "total: {} parameters, {} bytes of tensor data",
        f.n_parameters(),
        f.tensor_bytes()
    );
    out
}

fn float_json(x: f64, shortest: String) -> Json {
    if x.is_finite() {
        // Parse the shortest decimal form so an f32 prints as "1.0647699", not as its f64
        // expansion.
        shortest
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map_or(Json::Null, Json::Number)
    } else {
        // JSON has no NaN or infinities.
        Json::String(shortest)
    }
}

fn value_json(v: &Value) -> Json {
    match v {
        Value::U8(x) => json!(x),
        Value::I8(x) => json!(x),
        Value::U16(x) => json!(x),
        Value::I16(x) => json!(x),
        Value::U32(x) => json!(x),
        Value::I32(x) => json!(x),
        Value::U64(x) => json!(x),
        Value::I64(x) => json!(x),
        Value::F32(x) => float_json(f64::from(*x), format!("{x:?}")),
        Value::F64(x) => float_json(*x, format!("{x:?}")),
        Value::Bool(x) => json!(x),
        Value::String(s) => json!(s),
        Value::Array(a) => Json::Array(a.items.iter().map(value_json).collect()),
    }
}

fn to_json(f: &GgufFile<'_>) -> Json {
    json!({
        "version": f.version,
        "alignment": f.alignment,
        "file_bytes": f.file_len(),
        "metadata": f.metadata.iter().map(|(k, v)| json!({
            "key": k,
            "type": type_name(v),
            "value": value_json(v),
        })).collect::<Vec<_>>(),
        "tensors": f.tensors.iter().map(|t| json!({
            "name": t.name,
            "dims": t.dims,
            "type": t.ty.name(),
            "offset": t.offset,
            "bytes": t.n_bytes(),
        })).collect::<Vec<_>>(),
    })
}
