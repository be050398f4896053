//! Inputs declared by role: the kind finds them by name, and the key does not see the roles.

use std::path::Path;

use sky_dag::report::Collect;
use sky_dag::{
    build, BuildOptions, Graph, GraphSpec, Kind, Located, NodeSpec, Registry, Source, StageCtx,
    Workspace,
};

/// Writes `role=rel` for each input, in the order the roles are asked for.
struct Roles;

#[derive(serde::Serialize, serde::Deserialize)]
struct Params {
    ask: Vec<String>,
}

impl Kind for Roles {
    const NAME: &'static str = "roles";
    const VERSION: u32 = 1;
    type Params = Params;
    fn run(&self, p: Params, ctx: &mut StageCtx<'_>) -> anyhow::Result<()> {
        let mut text = String::new();
        for role in &p.ask {
            let rel = ctx.input(role).map_or("-", |i| i.rel.as_str());
            text.push_str(&format!("{role}={rel}\n"));
        }
        let all: Vec<String> = ctx.inputs.iter().map(|i| i.role.clone()).collect();
        text.push_str(&format!("all={}\n", all.join(",")));
        std::fs::write(&ctx.outputs[0], text)?;
        Ok(())
    }
}

/// Copies its first input.
struct Copy;

impl Kind for Copy {
    const NAME: &'static str = "copy";
    const VERSION: u32 = 1;
    type Params = ();
    fn run(&self, (): (), ctx: &mut StageCtx<'_>) -> anyhow::Result<()> {
        std::fs::copy(&ctx.inputs[0].path, &ctx.outputs[0])?;
        Ok(())
    }
}

fn graph(root: &Path, with_roles: bool) -> Graph {
    let ask = Params {
        ask: ["text", "up", "data", "none"].map(String::from).to_vec(),
    };
    let copy = NodeSpec::new::<Copy>("a", &(), 0..0)
        .unwrap()
        .input("in.txt", 0..0)
        .output("o/a", 0..0);
    let mut r = NodeSpec::new::<Roles>("r", &ask, 0..0).unwrap();
    r = if with_roles {
        r.input("plain.txt", 0..0)
            .input_as("up", "node:a", 0..0)
            .input_as("data", "data/*.txt", 0..0)
            .input_as("text", "in.txt", 0..0)
    } else {
        r.input("plain.txt", 0..0)
            .input("node:a", 0..0)
            .input("data/*.txt", 0..0)
            .input("in.txt", 0..0)
    };
    let spec = GraphSpec {
        nodes: vec![copy, r.output("o/r", 0..0)],
        release_dir: Located::new("site/public".into(), 0..0),
        store_dir: ".skyctl".into(),
        ..GraphSpec::default()
    };
    Graph::build(spec, &Source::default(), root).unwrap()
}

#[test]
fn a_kind_finds_inputs_by_role_and_roles_stay_out_of_the_key() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("in.txt"), "abc").unwrap();
    std::fs::write(dir.path().join("plain.txt"), "p").unwrap();
    std::fs::create_dir(dir.path().join("data")).unwrap();
    for f in ["x", "y"] {
        std::fs::write(dir.path().join(format!("data/{f}.txt")), f).unwrap();
    }
    let ws = Workspace::new(dir.path(), &dir.path().join(".skyctl")).unwrap();
    let mut reg = Registry::default();
    reg.add(Roles);
    reg.add(Copy);
    let opts = BuildOptions {
        jobs: 1,
        ..BuildOptions::default()
    };
    let g = graph(&ws.root, true);
    let r = &g.nodes[g.by_id["r"]];
    // `node:a` expands to each of a's outputs, every one with the role.
    assert_eq!(r.input_roles, ["", "up", "data", "text"]);
    let s = build(&ws, &g, &reg, &opts, &mut Collect::default()).unwrap();
    assert_eq!((s.executed, s.cached), (2, 0));
    let out = std::fs::read_to_string(dir.path().join("o/r")).unwrap();
    // A glob's role goes to each of its matches.
    assert_eq!(
        out,
        "text=in.txt\nup=o/a\ndata=data/x.txt\nnone=-\nall=,up,data,data,text\n"
    );
    // The same inputs declared without roles: the same keys, so nothing runs.
    let plain = graph(&ws.root, false);
    let s = build(&ws, &plain, &reg, &opts, &mut Collect::default()).unwrap();
    assert_eq!((s.executed, s.cached), (0, 2));
}
