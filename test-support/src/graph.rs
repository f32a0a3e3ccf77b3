//! Module graphs, for the tests that keep each crate's layering (`tests/workshop/module_graph.rs`,
//! `sandbox/tests/program/module_layers.rs`): which module uses which, and whether that goes in a circle.

use std::collections::{BTreeMap, BTreeSet};

/// Each module and the modules it uses.
pub type Graph = BTreeMap<String, BTreeSet<String>>;

/// A cycle in the graph as a path `a → b → … → a`, if there is one (depth-first search: a cycle
/// exists exactly when the search meets a module that is still on its own path).
pub fn find_cycle(graph: &Graph) -> Option<Vec<String>> {
    fn visit(
        module: &str,
        graph: &Graph,
        path: &mut Vec<String>,
        finished: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(start) = path.iter().position(|m| m == module) {
            let mut cycle = path[start..].to_vec();
            cycle.push(module.to_string());
            return Some(cycle);
        }
        if finished.contains(module) {
            return None;
        }
        path.push(module.to_string());
        for next in graph.get(module).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, path, finished) {
                return Some(cycle);
            }
        }
        path.pop();
        finished.insert(module.to_string());
        None
    }
    let mut finished = BTreeSet::new();
    graph
        .keys()
        .find_map(|module| visit(module, graph, &mut Vec::new(), &mut finished))
}
