//! The sandbox's files import each other in one direction only: no file imports, directly or
//! through others, a file that imports it, and each import points down (or across) the layer
//! table at the top of `sandbox/src/lib.rs`.
//!
//! The house rule: no file imports one above it. Run: `cargo test -p sandbox --test program module_layers:: -- --nocapture` (prints
//! the graph). The check reads the source text, so it needs no compiler support: a file depends
//! on module `m` when its code names a path `crate::m::...` (or `use crate::{m, ...}`); naming an
//! item of the crate root (`crate::Thing`) is a dependency on `lib.rs`, which itself depends on
//! every module it declares — so it always closes a cycle. `super::` only appears in unit-test
//! modules (`use super::*`), which belong to their own file, and is not an edge.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Module name → the modules its code names. `lib` is the crate root (`src/lib.rs`).
use test_support::graph::{find_cycle, Graph};

/// `src/*.rs` except `main.rs` (the binary is its own crate; it sees the library as `sandbox::`).
fn read_sources() -> BTreeMap<String, String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut sources = BTreeMap::new();
    for entry in std::fs::read_dir(&src).expect("sandbox/src is readable") {
        let path = entry.expect("directory entry").path();
        let Some(stem) = path.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        if path.extension().is_some_and(|e| e == "rs") && stem != "main" {
            let text = std::fs::read_to_string(&path).expect("source file is UTF-8");
            sources.insert(stem.to_string(), text);
        }
    }
    assert!(sources.contains_key("lib"), "found no src/lib.rs");
    sources
}

/// The code of a line: everything before a `//` comment (doc comments may mention paths).
fn code_of(line: &str) -> &str {
    match line.find("//") {
        Some(at) => &line[..at],
        None => line,
    }
}

/// The first path segment after each `crate::` in `code`: `crate::store::Filter` gives `store`,
/// `crate::{lock, store::Filter}` gives `lock` and `store`.
fn crate_paths(code: &str) -> Vec<String> {
    let identifier = |text: &str| -> String {
        text.trim_start()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let mut found = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        match rest.strip_prefix('{') {
            // A group: the first segment of each comma-separated entry (one level deep).
            Some(group) => {
                let group = group.split('}').next().unwrap_or_default();
                found.extend(group.split(',').map(identifier));
            }
            None => found.push(identifier(rest)),
        }
    }
    found.retain(|name| !name.is_empty() && name != "self");
    found
}

/// Who depends on whom, read from the source text.
fn dependency_graph(sources: &BTreeMap<String, String>) -> Graph {
    let mut graph = Graph::new();
    for (module, text) in sources {
        let mut uses = BTreeSet::new();
        for line in text.lines() {
            let code = code_of(line);
            if module == "lib" {
                // `mod store;` / `pub mod store;`: the root sees every module it declares.
                let declared = code
                    .trim()
                    .trim_start_matches("pub ")
                    .trim_start_matches("pub(crate) ");
                if let Some(name) = declared
                    .strip_prefix("mod ")
                    .and_then(|d| d.strip_suffix(';'))
                {
                    uses.insert(name.trim().to_string());
                }
            }
            for name in crate_paths(code) {
                // `crate::Thing` that is not a module is an item defined in the crate root.
                let target = if sources.contains_key(&name) {
                    name
                } else {
                    "lib".to_string()
                };
                if &target != module {
                    uses.insert(target);
                }
            }
        }
        graph.insert(module.clone(), uses);
    }
    graph
}

/// The layer table in lib.rs's doc: rows `//! | `store.rs` | ... | 2 store |` give
/// `store → 2`; `lib.rs` is a row too.
fn layer_table(lib: &str) -> BTreeMap<String, u32> {
    let mut layers = BTreeMap::new();
    for line in lib.lines() {
        let Some(row) = line.strip_prefix("//! |") else {
            continue;
        };
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let (Some(files), Some(layer)) = (cells.first(), cells.iter().rev().nth(1)) else {
            continue;
        };
        let Some(Ok(number)) = layer.split_whitespace().next().map(str::parse::<u32>) else {
            continue;
        };
        for file in files.split(',') {
            let name = file.trim().trim_matches('`').trim_end_matches(".rs");
            layers.insert(name.to_string(), number);
        }
    }
    layers
}

fn print_graph(graph: &Graph) {
    for (module, uses) in graph {
        let uses: Vec<&str> = uses.iter().map(String::as_str).collect();
        println!("{module:>12} → {}", uses.join(", "));
    }
}

/// No file of the sandbox imports, directly or through others, a file that imports it.
#[test]
fn the_sandbox_modules_import_each_other_without_a_cycle() {
    let graph = dependency_graph(&read_sources());
    print_graph(&graph);
    assert!(
        graph["lib"].len() > 10,
        "lib.rs declares its modules: {:?}",
        graph["lib"]
    );
    if let Some(cycle) = find_cycle(&graph) {
        panic!("import cycle: {}", cycle.join(" → "));
    }
    println!("no cycle among {} modules", graph.len());
}

/// Every file has a row in lib.rs's layer table, and imports only from its own layer or below.
#[test]
fn every_import_points_down_the_layer_table() {
    let sources = read_sources();
    let layers = layer_table(&sources["lib"]);
    let graph = dependency_graph(&sources);
    let mut upward = Vec::new();
    for (module, uses) in &graph {
        let Some(&own) = layers.get(module) else {
            panic!("{module}.rs has no row in lib.rs's module map (layers: {layers:?})");
        };
        // lib.rs declares every module: that is the root's job, not an import.
        if module == "lib" {
            continue;
        }
        for used in uses {
            let theirs = layers.get(used).copied().unwrap_or(u32::MAX);
            if theirs > own {
                upward.push(format!("{module} (layer {own}) → {used} (layer {theirs})"));
            }
        }
    }
    assert!(upward.is_empty(), "imports pointing up: {upward:#?}");
}

/// The checker itself: it reports the cycle in a small graph with one, and none in a chain.
#[test]
fn the_cycle_finder_reports_a_cycle_and_accepts_a_chain() {
    let graph = |edges: &[(&str, &str)]| -> Graph {
        let mut graph = Graph::new();
        for (from, to) in edges {
            graph
                .entry(from.to_string())
                .or_default()
                .insert(to.to_string());
            graph.entry(to.to_string()).or_default();
        }
        graph
    };
    let chain = graph(&[
        ("server", "handlers"),
        ("handlers", "state"),
        ("state", "store"),
    ]);
    assert_eq!(find_cycle(&chain), None);
    let circle = graph(&[
        ("server", "handlers"),
        ("handlers", "state"),
        ("state", "server"),
    ]);
    assert_eq!(
        find_cycle(&circle).map(|cycle| cycle.join(" → ")),
        Some("handlers → state → server → handlers".to_string())
    );
    assert_eq!(
        crate_paths("use crate::{lock, store::Filter}; crate::server::GIT_VERSION"),
        ["lock", "store", "server"]
    );
}
