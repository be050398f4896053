//! Every manifest error is reported before anything runs, with file:line:column.

mod common;

use common::*;

fn error_of(manifest: &str) -> String {
    let ws = Ws::new();
    ws.write("pipeline.toml", manifest);
    ws.write("in.txt", "x");
    let err = ws.fails(&["build"], 2);
    // Nothing ran: no outputs, no state.
    assert!(!ws.p("out").exists(), "a node ran despite: {err}");
    err
}

#[test]
fn unknown_key_with_did_you_mean() {
    let e = error_of("[[command]]\nname = \"a\"\nrun = \"true\"\noutptus = [\"out/a\"]\n");
    assert!(
        e.contains("pipeline.toml:4:1: unknown key `outptus` (did you mean `outputs`?)"),
        "{e}"
    );
}

#[test]
fn toml_syntax_error_is_located() {
    let e = error_of("[[command]]\nname = \"a\nrun = \"true\"\n");
    assert!(e.contains("pipeline.toml:2:"), "{e}");
}

#[test]
fn wrong_value_type_says_what_was_expected() {
    let e = error_of("[[command]]\nname = \"a\"\nrun = \"true\"\nexclusive = \"yes\"\n");
    assert!(
        e.contains("pipeline.toml:4:13:") && e.contains("expected a boolean"),
        "{e}"
    );
}

#[test]
fn reference_to_missing_node() {
    let e = error_of("[[command]]\nname = \"make-a\"\nrun = \"true\"\noutputs = [\"out/a\"]\n[[command]]\nname = \"b\"\nrun = \"true\"\ninputs = [\"node:make-b\"]\noutputs = [\"out/b\"]\n");
    assert!(e.contains("pipeline.toml:8:11: node `b`: input `node:make-b` refers to no node named `make-b` (did you mean `make-a`?)"), "{e}");
}

#[test]
fn reference_to_missing_model() {
    let e = error_of("[[model]]\nname = \"s1-pico\"\nsource = \"m\"\n[[golden]]\nname = \"g\"\nkind = \"model\"\nmodel = \"s1-pcio\"\ncases = \"c\"\nexpected = \"e\"\n");
    assert!(
        e.contains(
            "pipeline.toml:7:9: golden `g`: no [[model]] named `s1-pcio` (did you mean `s1-pico`?)"
        ),
        "{e}"
    );
}

#[test]
fn cycle_is_printed() {
    let e = error_of(
        "[[command]]\nname = \"a\"\nrun = \"true\"\ninputs = [\"out/c\"]\noutputs = [\"out/a\"]\n\
         [[command]]\nname = \"b\"\nrun = \"true\"\ninputs = [\"out/a\"]\noutputs = [\"out/b\"]\n\
         [[command]]\nname = \"c\"\nrun = \"true\"\ninputs = [\"out/b\"]\noutputs = [\"out/c\"]\n",
    );
    assert!(e.contains("dependency cycle: a -> c -> b -> a"), "{e}");
}

#[test]
fn two_nodes_writing_one_output() {
    let e = error_of("[[command]]\nname = \"a\"\nrun = \"true\"\noutputs = [\"out/x\"]\n[[command]]\nname = \"b\"\nrun = \"true\"\noutputs = [\"out/x\"]\n");
    assert!(
        e.contains("pipeline.toml:6:8: node `b`: output `out/x` also written by node `a`"),
        "{e}"
    );
}

#[test]
fn output_paths_outside_the_workspace() {
    let e = error_of("[[command]]\nname = \"a\"\nrun = \"true\"\noutputs = [\"../escape\"]\n");
    assert!(
        e.contains("pipeline.toml:4:12: output `../escape`: `..` is not allowed"),
        "{e}"
    );
    let e = error_of("[[command]]\nname = \"a\"\nrun = \"true\"\noutputs = [\"/tmp/escape\"]\n");
    assert!(e.contains("absolute paths are not allowed"), "{e}");
}

#[test]
fn output_through_a_symlink_leading_out() {
    let ws = Ws::new();
    let outside = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), ws.p("link")).unwrap();
    ws.write(
        "pipeline.toml",
        "[[command]]\nname = \"a\"\nrun = \"echo x > link/f\"\noutputs = [\"link/f\"]\n",
    );
    let e = ws.fails(&["build"], 2);
    assert!(
        e.contains("`link` is a symlink leading out of the workspace"),
        "{e}"
    );
    assert!(!outside.path().join("f").exists());
}

#[test]
fn missing_source_input_is_an_error_before_running() {
    let e = error_of("[[command]]\nname = \"a\"\nrun = \"mkdir out\"\ninputs = [\"nope.txt\"]\noutputs = [\"out/a\"]\n");
    assert!(
        e.contains("node `a`: input `nope.txt` does not exist"),
        "{e}"
    );
}

#[test]
fn unknown_target_suggests() {
    let ws = Ws::new();
    ws.write(
        "pipeline.toml",
        "[[command]]\nname = \"alpha\"\nrun = \"true\"\n",
    );
    let e = ws.fails(&["build", "alpah"], 2);
    assert!(
        e.contains("no node, model or kind named `alpah` (did you mean `alpha`?)"),
        "{e}"
    );
}

/// A policy rule that matches no tensor of the model's checkpoint is an error at the rule, with
/// the nearest tensor name, before anything runs (it used to fail only inside both convert
/// nodes, without a location).
#[test]
fn a_policy_rule_that_matches_no_tensor_is_located() {
    let ws = Ws::new();
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    copy_tree(&root.join("models/s1-pico"), &ws.p("models/s1-pico"));
    let manifest = |pattern: &str| {
        format!(
            "[policy.small]\ntype = \"f16\"\n[[policy.small.rule]]\nmatch = \"blk.*.ffn_up.weight\"\ntype = \"q8_0\"\n[[policy.small.rule]]\nmatch = \"{pattern}\"\ntype = \"f32\"\n\n[[model]]\nname = \"s1-pico\"\nsource = \"models/s1-pico\"\npolicy = \"small\"\nvariants = [\"f16\"]\n"
        )
    };
    ws.write("pipeline.toml", &manifest("blk.0.attn_qvk.weight"));
    let e = ws.fails(&["build"], 2);
    assert!(
        e.contains("pipeline.toml:7:9: model `s1-pico`: policy rule `blk.0.attn_qvk.weight` matches no tensor of the model (did you mean `blk.0.attn_qkv.weight`?)"),
        "{e}"
    );
    assert!(!ws.p("build").exists(), "a node ran despite: {e}");
    // The corrected rule builds.
    ws.write("pipeline.toml", &manifest("blk.0.attn_qkv.weight"));
    let out = ws.run(&["build"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `verify NAME` with a name that is no suite lists the suites, with a did-you-mean over them.
#[test]
fn verify_of_an_unknown_suite_names_the_suites() {
    let ws = Ws::new();
    ws.write(
        "pipeline.toml",
        "[[golden]]\nname = \"kernels\"\nkind = \"kernels\"\n\n[[golden]]\nname = \"kernels-again\"\nkind = \"kernels\"\n",
    );
    let e = ws.fails(&["verify", "kernls"], 2);
    assert_eq!(
        e.trim(),
        "skyctl: no golden suite named `kernls` (did you mean `kernels`?); the suites: kernels, kernels-again"
    );
    assert!(!ws.p("build").exists(), "nothing may run: {e}");
}

/// A bench mode whose variant is not built is refused at the mode (it used to measure nothing
/// and print null).
#[test]
fn a_bench_mode_for_a_variant_not_built_is_located() {
    let e = error_of("[[model]]\nname = \"m\"\nsource = \"models/m\"\nvariants = [\"f16\"]\nbench = { modes = [\"f32\", \"tuned\"] }\n");
    assert!(
        e.contains("pipeline.toml:5:27: model `m`: bench mode `tuned` measures the tuned variant, which `variants` does not build"),
        "{e}"
    );
    let e = error_of("[[model]]\nname = \"m\"\nsource = \"models/m\"\nvariants = [\"q8_0\"]\nbench = { modes = [\"q8-fast\"] }\n");
    assert!(
        e.contains(
            "bench mode `q8-fast` measures the f16 or f32 variant, which `variants` does not build"
        ),
        "{e}"
    );
}
