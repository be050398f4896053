//! What blocks the release: a failing golden suite of a variant the release publishes keeps
//! the release tree as it was; any other failing node makes the build exit 1 (listed in the
//! summary) while the release of what succeeded is written. From an `init` project.

mod common;

use common::{snapshot, Ws};

/// An `init` project whose model also builds an f32 variant that is not published.
fn project() -> Ws {
    let ws = Ws::new();
    let o = ws.run(&["init"]);
    assert_eq!(o.status.code(), Some(0));
    let text = ws.read("pipeline.toml").replace(
        "variants = [\"f16\", \"q8_0\"]",
        "variants = [\"f32\", \"f16\", \"q8_0\"]",
    );
    assert!(text.contains("\"f32\", \"f16\""), "the template changed");
    ws.write("pipeline.toml", &text);
    ws
}

/// A suite that cannot pass: int8 compute against expected outputs recorded in f32, within a
/// tolerance far below int8's error.
fn failing_suite(name: &str, variant: &str) -> String {
    format!(
        "\n[[golden]]\nname = \"{name}\"\nkind = \"model\"\nmodel = \"s1-pico\"\nvariant = \"{variant}\"\n\
         compute = \"q8\"\ncases = \"golden/s1-pico/cases.jsonl\"\nexpected = \"golden/s1-pico/expected.jsonl\"\n\
         tolerance = 1e-9\n"
    )
}

fn append(ws: &Ws, text: &str) {
    let mut s = ws.read("pipeline.toml");
    s.push_str(text);
    ws.write("pipeline.toml", &s);
}

#[test]
fn a_failing_suite_of_an_unpublished_variant_does_not_hold_back_the_release() {
    let ws = project();
    append(&ws, &failing_suite("side", "f32"));
    // Without -k, and one job: the failure must not stop the nodes the release needs.
    let b = ws.build(&["-j", "1"]);
    assert_eq!(b.code, 1, "{}", b.stderr);
    assert_eq!(b.with_status("failed"), vec!["golden/side"]);
    assert_eq!(
        b.summary["failed_nodes"],
        serde_json::json!(["golden/side"])
    );
    assert_eq!(
        b.summary["release"],
        serde_json::json!({"dir": "site/public", "published": true, "blocked_by": []})
    );
    for f in [
        "models/s1-pico.gguf",
        "models/s1-pico.q8_0.gguf",
        "models/manifest.json",
        "bench.json",
        "index.html",
        "sky-web.simd.wasm",
        "SHA256SUMS",
    ] {
        assert!(ws.p(&format!("site/public/{f}")).is_file(), "{f} missing");
    }
    // The text summary says so, and the next build still fails on the same suite.
    let out = ws.run(&["build"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("FAILED    golden/side")
            && err.contains(
                "skyctl: release `site/public` published: the release depends on none of the failed nodes (golden/side)"
            ),
        "{err}"
    );
}

#[test]
fn a_failing_suite_of_a_published_variant_keeps_the_release_as_it_was() {
    let ws = project();
    let b = ws.build(&[]);
    assert_eq!(b.code, 0, "{}", b.stderr);
    let before = snapshot(&ws.p("site/public"));
    assert!(before.contains_key("SHA256SUMS"), "{:?}", before.keys());

    // A new checksum file for the release, and a suite of the published f16 file that fails.
    let text = ws
        .read("pipeline.toml")
        .replace("sha256sum <", "sha256sum -b <");
    ws.write("pipeline.toml", &text);
    append(&ws, &failing_suite("gate", "f16"));
    for args in [&[][..], &["-k"][..]] {
        let b = ws.build(args);
        assert_eq!(b.code, 1, "{}", b.stderr);
        assert_eq!(
            b.summary["failed_nodes"],
            serde_json::json!(["golden/gate"])
        );
        let release = &b.summary["release"];
        assert_eq!(release["published"], false, "{args:?}");
        let blocked = release["blocked_by"].as_array().unwrap();
        if args.is_empty() {
            // The failure stopped the build: what had not run yet (cache hits included) is
            // listed too.
            assert!(blocked.contains(&"golden/gate".into()), "{release}");
        } else {
            assert_eq!(blocked, &["golden/gate"], "{args:?}");
        }
        assert_eq!(snapshot(&ws.p("site/public")), before, "{args:?}");
    }
    let out = ws.run(&["build"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "skyctl: release `site/public` left as it was: it depends on golden/gate (failed)"
        ),
        "{err}"
    );

    // Without the suite the new release goes out.
    let text = ws.read("pipeline.toml");
    let cut = text.find("\n[[golden]]\nname = \"gate\"").unwrap();
    ws.write("pipeline.toml", &text[..cut]);
    let b = ws.build(&[]);
    assert_eq!(b.code, 0, "{}", b.stderr);
    assert!(ws.read("site/public/SHA256SUMS").contains(" *models/"));
}

#[test]
fn a_failing_command_the_release_does_not_use_fails_the_build_not_the_release() {
    let ws = Ws::new();
    ws.write("in.txt", "x\n");
    let side = "\n[[command]]\nname = \"lint\"\nrun = \"echo lint-says-no >&2; exit 3\"\noutputs = [\"out/lint.txt\"]\n";
    ws.write("pipeline.toml", &format!("{}{side}", common::TWO_COMMANDS));
    let b = ws.build(&["-j", "1"]);
    assert_eq!(b.code, 1, "{}", b.stderr);
    assert_eq!(b.summary["failed_nodes"], serde_json::json!(["lint"]));
    assert_eq!(b.summary["release"]["published"], true);
    assert_eq!(ws.read("site/public/b.txt"), "X\nA\n");

    // The release's own chain failing: it stays as it was, and its dependents are not run.
    ws.write("in.txt", "y\n");
    let text = ws
        .read("pipeline.toml")
        .replace("cat in.txt", "cat missing.txt");
    ws.write("pipeline.toml", &text);
    let b = ws.build(&["-k"]);
    assert_eq!(b.code, 1, "{}", b.stderr);
    let release = &b.summary["release"];
    assert_eq!(release["published"], false);
    assert_eq!(release["blocked_by"], serde_json::json!(["a", "b"]));
    assert_eq!(ws.read("site/public/b.txt"), "X\nA\n");
}
