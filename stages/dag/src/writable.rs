//! Where skyctl may write: the one rule every check of a path it is about to write asks
//! (a declared output, the release tree, the store, the build folder, and the file or folder
//! a direct tool such as `convert`, `random` or `golden` writes).
//!
//! [`may_write`] refuses a path that has a component named `.git` (version control's folder:
//! the workspace's own repository, or a nested one, at any depth), and a path that is, lies
//! inside or contains one of the [`Protected`] paths the caller names (the declaration file,
//! the store, the files a tool reads). The check is on the path's components only: it reads
//! nothing from the disk, so it costs a no-op build nothing. Callers say the refusal in their
//! own words around the [`Refusal`], which names the relation and what is protected.

use std::path::{Component, Path, PathBuf};

/// The name of version control's folder, refused as a component of any written path.
pub const VCS_DIR: &str = ".git";

/// What version control's folder is called in messages.
pub const VCS_WHAT: &str = "version control's folder";

/// A path nothing may write, with what it is in messages ("the pipeline file").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Protected {
    /// The path, in the same terms as the paths checked against it (workspace-relative, or
    /// absolute and resolved).
    pub path: PathBuf,
    /// What it is, in messages.
    pub what: String,
    /// A written folder may hold it (the store folder holds the workspace state): only being
    /// it, or lying inside it, is refused.
    pub may_be_held: bool,
}

impl Protected {
    /// `path`, called `what` in messages.
    pub fn new(path: impl Into<PathBuf>, what: impl Into<String>) -> Protected {
        Protected {
            path: path.into(),
            what: what.into(),
            may_be_held: false,
        }
    }

    /// A written folder may hold it ([`Protected::may_be_held`]).
    pub fn may_be_held(mut self) -> Protected {
        self.may_be_held = true;
        self
    }
}

/// How a refused path stands to what it would overwrite.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Relation {
    /// It is the protected path.
    Is,
    /// It lies inside the protected path.
    LiesInside,
    /// It contains the protected path (writing it replaces what is inside).
    Contains,
}

impl std::fmt::Display for Relation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Relation::Is => "is",
            Relation::LiesInside => "lies inside",
            Relation::Contains => "contains",
        })
    }
}

/// Why a path may not be written: `{relation} {what} `{path}``, e.g. "lies inside version
/// control's folder `sub/.git`".
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{relation} {what} `{}`", path.display())]
pub struct Refusal {
    /// How the refused path stands to `path`.
    pub relation: Relation,
    /// What `path` is.
    pub what: String,
    /// The protected path.
    pub path: PathBuf,
}

/// Whether skyctl may write `target`: not when a component of it is `.git`, nor when it is,
/// lies inside or contains one of `protected` (in the terms of the caller: both relative to the
/// workspace, or both absolute and resolved, [`resolved`]).
pub fn may_write(target: &Path, protected: &[Protected]) -> Result<(), Refusal> {
    let mut upto = PathBuf::new();
    let mut parts = target.components().peekable();
    while let Some(c) = parts.next() {
        upto.push(c);
        if c == Component::Normal(VCS_DIR.as_ref()) {
            let relation = if parts.peek().is_none() {
                Relation::Is
            } else {
                Relation::LiesInside
            };
            return Err(Refusal {
                relation,
                what: VCS_WHAT.to_string(),
                path: upto,
            });
        }
    }
    for p in protected {
        let relation = if target == p.path {
            Relation::Is
        } else if target.starts_with(&p.path) {
            Relation::LiesInside
        } else if p.path.starts_with(target) && !p.may_be_held {
            Relation::Contains
        } else {
            continue;
        };
        return Err(Refusal {
            relation,
            what: p.what.clone(),
            path: p.path.clone(),
        });
    }
    Ok(())
}

/// `path` made absolute with the symlinks of its longest existing folder resolved, and the
/// rest appended (`..` taken lexically): where a write of `path` lands, in the terms
/// [`may_write`] compares (a symlink as the last component is not followed: a write replaces
/// the link, not what it names). For the paths the direct tools are given.
pub fn resolved(path: &Path) -> PathBuf {
    let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let parts: Vec<Component> = abs.components().collect();
    // The longest prefix short of the last component that resolves, then the rest.
    for split in (1..parts.len()).rev() {
        let Ok(mut out) = parts[..split].iter().collect::<PathBuf>().canonicalize() else {
            continue;
        };
        for c in &parts[split..] {
            match c {
                Component::ParentDir => {
                    out.pop();
                }
                Component::CurDir => {}
                c => out.push(c),
            }
        }
        return out;
    }
    abs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> Vec<Protected> {
        vec![
            Protected::new("pipeline.toml", "the pipeline file"),
            Protected::new(".skyctl/store", "the store"),
            Protected::new(".skyctl/state-v1", "skyctl's workspace state").may_be_held(),
        ]
    }

    fn refused(p: &str) -> Option<String> {
        may_write(Path::new(p), &rules())
            .err()
            .map(|e| e.to_string())
    }

    #[test]
    fn git_is_refused_at_any_depth() {
        assert_eq!(
            refused(".git").as_deref(),
            Some("is version control's folder `.git`")
        );
        assert_eq!(
            refused(".git/hooks/pre-commit").as_deref(),
            Some("lies inside version control's folder `.git`")
        );
        assert_eq!(
            refused("sub/.git/hooks/pre-commit").as_deref(),
            Some("lies inside version control's folder `sub/.git`")
        );
        assert_eq!(
            refused("a/b/c/.git").as_deref(),
            Some("is version control's folder `a/b/c/.git`")
        );
        assert_eq!(
            refused("/home/u/repo/.git/config").as_deref(),
            Some("lies inside version control's folder `/home/u/repo/.git`")
        );
        // A name that only starts or ends like it is not it.
        for ok in [
            ".github/workflows/ci.yml",
            "x.git",
            ".gitignore",
            "a/.git2/b",
        ] {
            assert_eq!(refused(ok), None, "{ok}");
        }
    }

    #[test]
    fn the_declaration_file_and_the_store_are_refused() {
        assert_eq!(
            refused("pipeline.toml").as_deref(),
            Some("is the pipeline file `pipeline.toml`")
        );
        assert_eq!(
            refused("pipeline.toml/x").as_deref(),
            Some("lies inside the pipeline file `pipeline.toml`")
        );
        assert_eq!(
            refused(".skyctl/store/blobs/ab/cd").as_deref(),
            Some("lies inside the store `.skyctl/store`")
        );
        assert_eq!(
            refused(".skyctl/store").as_deref(),
            Some("is the store `.skyctl/store`")
        );
        assert_eq!(
            refused(".skyctl").as_deref(),
            Some("contains the store `.skyctl/store`")
        );
        // Components, not prefixes of names.
        assert_eq!(refused("pipeline.toml.bak"), None);
        assert_eq!(refused(".skyctl/storehouse"), None);
        assert_eq!(refused("out/model.gguf"), None);
        // What may be held is refused only when written, or written into.
        let held = [Protected::new(".skyctl/state-v1", "the state").may_be_held()];
        assert!(may_write(Path::new(".skyctl"), &held).is_ok());
        assert_eq!(
            may_write(Path::new(".skyctl/state-v1/x"), &held).map_err(|e| e.relation),
            Err(Relation::LiesInside)
        );
    }

    #[test]
    fn resolved_paths_follow_existing_folders_only() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("real/ck")).unwrap();
        std::os::unix::fs::symlink("real", root.join("link")).unwrap();
        assert_eq!(
            resolved(&root.join("link/ck/model.safetensors")),
            root.join("real/ck/model.safetensors")
        );
        assert_eq!(
            resolved(&root.join("link/new/deeper/out.gguf")),
            root.join("real/new/deeper/out.gguf")
        );
        assert_eq!(
            resolved(&root.join("real/new/../ck/x")),
            root.join("real/ck/x")
        );
        // The last component is not followed.
        std::os::unix::fs::symlink("real/ck", root.join("last")).unwrap();
        assert_eq!(resolved(&root.join("last")), root.join("last"));
    }
}
