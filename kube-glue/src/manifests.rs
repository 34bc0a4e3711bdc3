//! Manifests read from files: a YAML/JSON file, or the `.yaml`/`.yml`/`.json` files of a
//! directory (by name), lists flattened as `workloadspread_core::manifests` does.

use anyhow::{Context, Result};
use serde_json::Value;
use std::path::{Path, PathBuf};
use workloadspread_core::manifests::objects_from_yaml;

/// The objects of each manifest file of `path` ([`files`]), file by file.
pub fn read(path: &Path) -> Result<Vec<(PathBuf, Vec<Value>)>> {
    files(path)?
        .into_iter()
        .map(|file| {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("reading {}", file.display()))?;
            let objects =
                objects_from_yaml(&text).with_context(|| format!("parsing {}", file.display()))?;
            Ok((file, objects))
        })
        .collect()
}

/// Every object of the manifest files of `path`, in file-name order.
pub fn load_objects(path: &Path) -> Result<Vec<Value>> {
    Ok(read(path)?.into_iter().flat_map(|(_, o)| o).collect())
}

/// `path` itself, or the manifest files of the directory `path`, sorted by name.
pub fn files(path: &Path) -> Result<Vec<PathBuf>> {
    if !path.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files = std::fs::read_dir(path)
        .and_then(|dir| {
            dir.map(|entry| entry.map(|e| e.path()))
                .collect::<std::io::Result<Vec<_>>>()
        })
        .with_context(|| format!("listing {}", path.display()))?;
    files.retain(|p| {
        matches!(
            p.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml" | "json")
        )
    });
    files.sort();
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(objects: &[Value]) -> Vec<&str> {
        objects
            .iter()
            .filter_map(|o| o["metadata"]["name"].as_str())
            .collect()
    }

    #[test]
    fn loads_a_directory_of_dumps_in_file_name_order() {
        let dir =
            std::env::temp_dir().join(format!("ws-kube-glue-manifests-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |name: &str, text: &str| std::fs::write(dir.join(name), text).unwrap();
        write(
            "b-pods.json",
            r#"[{"kind": "Pod", "metadata": {"name": "p2"}}]"#,
        );
        write(
            "a-dump.yaml",
            "kind: PodList\nitems: [{kind: Pod, metadata: {name: p1}}]\n---\nkind: Node\nmetadata: {name: n}\n",
        );
        write("notes.txt", "not: [a manifest");
        assert_eq!(names(&load_objects(&dir).unwrap()), ["p1", "n", "p2"]);
        let per_file: Vec<_> = read(&dir)
            .unwrap()
            .into_iter()
            .map(|(f, o)| (f, o.len()))
            .collect();
        assert_eq!(
            per_file,
            [(dir.join("a-dump.yaml"), 2), (dir.join("b-pods.json"), 1)]
        );
        assert_eq!(
            names(&load_objects(&dir.join("b-pods.json")).unwrap()),
            ["p2"]
        );

        let missing = format!("{:#}", load_objects(&dir.join("absent.yaml")).unwrap_err());
        assert!(
            missing.contains("reading") && missing.contains("absent.yaml"),
            "{missing}"
        );
        write("c-broken.yml", "kind: [");
        let broken = format!("{:#}", load_objects(&dir).unwrap_err());
        assert!(
            broken.contains("parsing") && broken.contains("c-broken.yml"),
            "{broken}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
