//! Neither crate has an import cycle between its files: the operator (`src/`) and the sandbox
//! (`sandbox/src/`, including its `runtime/` folder) each read top-down, every file using only
//! files below it.
//!
//! The house rule: no file imports one above it; `sandbox/tests/program/module_layers.rs` also holds the sandbox's files to its layer
//! table. The check reads source text: a file uses module `m` when its code (comments and
//! `#[cfg(test)]` modules left out) names `crate::m::...` or, relative to its parent,
//! `super::m::...`. A folder module (`watch/mod.rs`, `runtime.rs`) and the files inside it are one
//! room: a child may use what its parent defines and the parent what its children do, as Rust
//! modules are meant to; between sibling files, and between rooms, an import goes one way only.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use test_support::graph::{find_cycle, Graph};

/// Module path (`watch::frame`, `runtime::pod`; `""` for the crate root) → source text.
fn modules(root: &Path) -> BTreeMap<String, String> {
    let mut files = Vec::new();
    collect(root, &mut files);
    let mut modules = BTreeMap::new();
    for file in files {
        let relative = file.strip_prefix(root).expect("under the root");
        let mut parts: Vec<String> = relative
            .with_extension("")
            .iter()
            .map(|part| part.to_string_lossy().into_owned())
            .collect();
        if parts.first().is_some_and(|first| first == "bin") || parts == ["main"] {
            continue; // binaries are crates of their own
        }
        if parts
            .last()
            .is_some_and(|last| last == "mod" || last == "lib")
        {
            parts.pop();
        }
        let text = std::fs::read_to_string(&file).expect("source is UTF-8");
        modules.insert(parts.join("::"), text);
    }
    modules
}

fn collect(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir)
        .expect("readable source folder")
        .flatten()
    {
        let path = entry.path();
        if path.is_dir() {
            collect(&path, files);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            files.push(path);
        }
    }
}

/// The code a file runs: comments dropped, and nothing from its `#[cfg(test)]` module on.
fn code_lines(text: &str) -> Vec<&str> {
    text.lines()
        .take_while(|line| line.trim() != "#[cfg(test)]")
        .map(|line| line.split("//").next().unwrap_or_default())
        .collect()
}

fn parent(module: &str) -> String {
    module
        .rsplit_once("::")
        .map(|(parent, _)| parent.to_string())
        .unwrap_or_default()
}

/// The paths a line names after `prefix` (`crate::` or `super::`), as segments: `a::b::C`, and
/// each entry of a `{...}` group one level deep.
fn named_paths(code: &str, prefix: &str) -> Vec<Vec<String>> {
    let segments = |text: &str| -> Vec<String> {
        text.split("::")
            .map(|s| {
                s.trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect::<String>()
            })
            .take_while(|s| !s.is_empty())
            .collect()
    };
    let mut found = Vec::new();
    for (at, _) in code.match_indices(prefix) {
        // `super::super::x` is seen once, from its first `super::`.
        if prefix == "super::" && code[..at].ends_with("super::") {
            continue;
        }
        let mut rest = &code[at + prefix.len()..];
        let mut ups = 0;
        while let Some(more) = rest.strip_prefix("super::") {
            ups += 1;
            rest = more;
        }
        let lead: Vec<String> = std::iter::repeat_n("super".to_string(), ups).collect();
        let head = rest.split('{').next().unwrap_or_default();
        let head_segments = segments(head);
        // A `{...}` group right after the path (`crate::{a, b}`, `super::x::{C, D}`).
        let group_start = rest.find('{').filter(|brace| {
            let before = rest[..*brace].trim();
            before.is_empty() || (before.ends_with("::") && segments(before) == head_segments)
        });
        match group_start {
            Some(brace) => {
                let group = rest[brace + 1..].split('}').next().unwrap_or_default();
                for entry in group.split(',') {
                    let mut path = lead.clone();
                    path.extend(head_segments.iter().cloned());
                    path.extend(segments(entry));
                    found.push(path);
                }
            }
            None => {
                let mut path = lead;
                path.extend(head_segments);
                found.push(path);
            }
        }
    }
    found
}

/// The longest known module a path names, starting from `base`.
fn resolve(base: &str, path: &[String], known: &BTreeMap<String, String>) -> String {
    let mut base = base.to_string();
    let mut rest = path;
    while let Some((first, more)) = rest.split_first() {
        if first != "super" {
            break;
        }
        base = parent(&base);
        rest = more;
    }
    let mut best = base.clone();
    let mut candidate = base;
    for segment in rest {
        candidate = if candidate.is_empty() {
            segment.clone()
        } else {
            format!("{candidate}::{segment}")
        };
        if known.contains_key(&candidate) {
            best = candidate.clone();
        } else {
            break;
        }
    }
    best
}

/// Whether one module is the other's ancestor (or the same): the same room.
fn same_room(a: &str, b: &str) -> bool {
    let within = |inner: &str, outer: &str| {
        outer.is_empty() || inner == outer || inner.starts_with(&format!("{outer}::"))
    };
    within(a, b) || within(b, a)
}

fn graph(root: &Path) -> Graph {
    let known = modules(root);
    let mut graph = Graph::new();
    for (module, text) in &known {
        let mut uses = BTreeSet::new();
        for code in code_lines(text) {
            for path in named_paths(code, "crate::") {
                uses.insert(resolve("", &path, &known));
            }
            for path in named_paths(code, "super::") {
                let mut with_super = vec!["super".to_string()];
                with_super.extend(path);
                uses.insert(resolve(module, &with_super, &known));
            }
        }
        uses.retain(|used| !same_room(module, used));
        graph.insert(module.clone(), uses);
    }
    graph
}

fn assert_acyclic(root: &str) {
    let graph = graph(&Path::new(env!("CARGO_MANIFEST_DIR")).join(root));
    for (module, uses) in &graph {
        let name = if module.is_empty() { "(root)" } else { module };
        println!(
            "{name:>22} → {}",
            uses.iter().cloned().collect::<Vec<_>>().join(", ")
        );
    }
    if let Some(cycle) = find_cycle(&graph) {
        panic!("{root}: import cycle: {}", cycle.join(" → "));
    }
}

/// The operator's files import each other one way only.
#[test]
fn the_operator_has_no_import_cycle() {
    assert_acyclic("src");
}

/// The sandbox's files, its `runtime/` folder included, import each other one way only.
#[test]
fn the_sandbox_has_no_import_cycle() {
    assert_acyclic("sandbox/src");
}

/// The reader resolves `crate::`, groups and `super::`, and the cycle finder finds a cycle.
#[test]
fn paths_resolve_and_cycles_are_found() {
    let known: BTreeMap<String, String> = ["", "a", "a::b", "c"]
        .iter()
        .map(|m| (m.to_string(), String::new()))
        .collect();
    let paths = named_paths("use crate::{a::b::Thing, c};", "crate::");
    let resolved: Vec<String> = paths.iter().map(|p| resolve("", p, &known)).collect();
    assert_eq!(resolved, ["a::b", "c"]);
    let up = named_paths("use super::b::Other;", "super::");
    let mut with_super = vec!["super".to_string()];
    with_super.extend(up[0].clone());
    assert_eq!(resolve("a::x", &with_super, &known), "a::b");
    assert!(same_room("a::b", "a") && !same_room("a::b", "c"));
    let mut graph = Graph::new();
    graph.insert("a".into(), BTreeSet::from(["c".to_string()]));
    graph.insert("c".into(), BTreeSet::from(["a".to_string()]));
    assert_eq!(
        find_cycle(&graph),
        Some(vec!["a".to_string(), "c".to_string(), "a".to_string()])
    );
}

/// Module path → its file, relative to the repository (`watch::frame` → `src/watch/frame.rs`).
fn module_files(root: &Path) -> BTreeMap<String, String> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    collect(&repo.join(root), &mut files);
    let mut found = BTreeMap::new();
    for file in files {
        let relative = file.strip_prefix(repo.join(root)).expect("under the root");
        let mut parts: Vec<String> = relative
            .with_extension("")
            .iter()
            .map(|part| part.to_string_lossy().into_owned())
            .collect();
        if parts.first().is_some_and(|first| first == "bin") {
            continue;
        }
        if parts
            .last()
            .is_some_and(|last| last == "mod" || last == "lib")
        {
            parts.pop();
        }
        let path = file.strip_prefix(repo).expect("in the repository");
        found.insert(parts.join("::"), path.to_string_lossy().into_owned());
    }
    found
}

/// The modules of `src/` a stage binary reaches: what it names of the library
/// (`postgres_operator::a::b`), then from each module reached what that one names (`crate::`,
/// `super::`) and the child modules it declares (`mod x;`). The root's declarations are not
/// followed: `lib.rs` declares every module, and a binary uses only what it names.
fn reached_by(stage: &str, known: &BTreeMap<String, String>) -> BTreeSet<String> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(repo.join(stage)).expect("the stage's source");
    let mut todo: Vec<String> = code_lines(&text)
        .into_iter()
        .flat_map(|code| named_paths(code, "postgres_operator::"))
        .map(|path| resolve("", &path, known))
        .collect();
    let mut reached = BTreeSet::new();
    while let Some(module) = todo.pop() {
        if !reached.insert(module.clone()) || module.is_empty() {
            continue;
        }
        for code in code_lines(&known[&module]) {
            for path in named_paths(code, "crate::") {
                todo.push(resolve("", &path, known));
            }
            for path in named_paths(code, "super::") {
                let mut with_super = vec!["super".to_string()];
                with_super.extend(path);
                todo.push(resolve(&module, &with_super, known));
            }
            let declared = code
                .trim()
                .trim_start_matches("pub(crate) ")
                .trim_start_matches("pub ")
                .strip_prefix("mod ")
                .and_then(|rest| rest.trim().strip_suffix(';'));
            if let Some(child) = declared {
                let child = format!("{module}::{}", child.trim());
                if known.contains_key(&child) {
                    todo.push(child);
                }
            }
        }
    }
    reached.remove("");
    reached
}

/// Lines of code: not blank, not a comment, nothing from `#[cfg(test)]` on.
fn code_line_count(text: &str) -> usize {
    code_lines(text)
        .into_iter()
        .filter(|line| !line.trim().is_empty())
        .count()
}

/// A step's two reading lists in WORKSHOP.md: the **Lesson** (numbered, read in order) and the
/// **Support** (skip on first read). Each item opens with one file's path in backticks.
struct ReadingLists {
    lesson: Vec<String>,
    support: Vec<String>,
}

/// The files listed after the paragraph that starts with `marker`, up to the next blank line:
/// each item (`1. `, `- `) opens with one path in backticks.
fn list_after(section: &str, marker: &str) -> Vec<String> {
    let Some(at) = section.find(&format!("\n{marker}")) else {
        return Vec::new();
    };
    // The marker's paragraph (it may wrap), then the items up to the next blank line.
    section[at + 1..]
        .lines()
        .skip_while(|line| !line.trim().is_empty())
        .skip_while(|line| line.trim().is_empty())
        .take_while(|line| !line.trim().is_empty())
        .filter_map(|line| {
            let item = line.trim_start();
            let numbered = item.trim_start_matches(|c: char| c.is_ascii_digit());
            let rest = if numbered.len() < item.len() {
                numbered.strip_prefix(". ")
            } else {
                item.strip_prefix("- ")
            }?;
            let path = rest.strip_prefix('`')?.split('`').next()?;
            Some(path.to_string())
        })
        .collect()
}

/// The reading lists of WORKSHOP.md's step `number`.
fn reading_lists(workshop: &str, number: usize) -> ReadingLists {
    reading_lists_under(workshop, &format!("## Step {number:02}:"))
}

/// The reading lists of the WORKSHOP.md section whose heading starts with `heading`.
fn reading_lists_under(workshop: &str, heading: &str) -> ReadingLists {
    let Some(start) = workshop.find(heading) else {
        panic!("WORKSHOP.md has no {heading} section");
    };
    let section = &workshop[start + heading.len()..];
    let section = &section[..section.find("\n## ").unwrap_or(section.len())];
    ReadingLists {
        lesson: list_after(section, "**Lesson**"),
        support: list_after(section, "**Support**"),
    }
}

/// A support file's `//!` header opens with what it does and why a learner may skip it on first
/// read: its first paragraph says "first read".
fn says_it_may_be_skipped(text: &str) -> bool {
    let paragraph: Vec<&str> = text
        .lines()
        .take_while(|line| line.starts_with("//!") && line.trim() != "//!")
        .map(|line| line.trim_start_matches("//!").trim())
        .collect();
    paragraph.join(" ").contains("first read")
}

/// The chapters whose lists are checked, in order: each step with its stage, then the Deployer's
/// chapter with its binary; and each one's cap on its lesson's lines of code, where it has one.
fn chapters() -> Vec<(String, String, Option<usize>)> {
    let caps = [Some(400), Some(800), Some(550), None, None, None];
    let mut chapters: Vec<_> = (1..=6)
        .map(|number| {
            let heading = format!("## Step {number:02}:");
            (
                heading,
                format!("stages/stage{number:02}.rs"),
                caps[number - 1],
            )
        })
        .collect();
    chapters.push((
        DEPLOYER_CHAPTER.to_string(),
        "src/bin/deployer.rs".to_string(),
        Some(600),
    ));
    chapters
}

/// The chapter after the six steps: a second operator on steps 01–03's library.
const DEPLOYER_CHAPTER: &str = "## Your own operator: the Deployer";

/// Each step of WORKSHOP.md opens with two lists — the Lesson, read in order, and the Support,
/// skipped on first read — and together they are exactly the stage's binary and the files of
/// `src/` it reaches that the earlier stages did not, each file on one list only: the text cannot
/// drift from the code. Prints each step's files and lines of code (not blank, not comments, not
/// tests), its lesson's and the whole's: the measure of how much a learner reads per step.
#[test]
fn each_steps_reading_lists_are_what_its_stage_newly_reaches() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let known = modules(&repo.join("src"));
    let files = module_files(Path::new("src"));
    let workshop = std::fs::read_to_string(repo.join("WORKSHOP.md")).expect("WORKSHOP.md");
    let lines_of = |file: &String| {
        code_line_count(&std::fs::read_to_string(repo.join(file)).expect("readable"))
    };
    let mut seen = BTreeSet::new();
    let (mut total, mut lesson_total) = (0, 0);
    let mut problems = Vec::new();
    for (heading, stage, cap) in chapters() {
        // `step 01`, as the counts have always been printed; `the Deployer` for its chapter.
        let number = match heading.strip_prefix("## Step ") {
            Some(rest) => format!("step {}", &rest[..2]),
            None => "the Deployer".to_string(),
        };
        let reached = reached_by(&stage, &known);
        let mut new: BTreeSet<String> = reached
            .difference(&seen)
            .map(|module| files[module].clone())
            .collect();
        new.insert(stage.clone());
        seen.extend(reached);
        let lists = reading_lists_under(&workshop, &heading);
        let lines: usize = new.iter().map(lines_of).sum();
        let lesson_lines: usize = lists
            .lesson
            .iter()
            .filter(|file| new.contains(*file))
            .map(lines_of)
            .sum();
        total += lines;
        lesson_total += lesson_lines;
        println!(
            "{number}: {} files, {lines} lines of code; lesson {} files, {lesson_lines} lines: {}",
            new.len(),
            lists.lesson.len(),
            lists.lesson.join(", ")
        );
        if let Some(cap) = cap.filter(|cap| lesson_lines > *cap) {
            problems.push(format!(
                "{number}: its lesson is {lesson_lines} lines of code, over its cap of {cap}"
            ));
        }
        let lesson: BTreeSet<String> = lists.lesson.iter().cloned().collect();
        let support: BTreeSet<String> = lists.support.iter().cloned().collect();
        if lesson.len() < lists.lesson.len() || support.len() < lists.support.len() {
            problems.push(format!("{number}: a file is listed twice on one list"));
        }
        let both: Vec<_> = lesson.intersection(&support).collect();
        if !both.is_empty() {
            problems.push(format!(
                "{number}: on both the Lesson and the Support list: {both:?}"
            ));
        }
        let listed: BTreeSet<String> = lesson.union(&support).cloned().collect();
        if listed != new {
            problems.push(format!(
                "{number}: listed but not reached: {:?}; reached but not listed: {:?}",
                listed.difference(&new).collect::<Vec<_>>(),
                new.difference(&listed).collect::<Vec<_>>()
            ));
        }
        for file in support.intersection(&new) {
            let text = std::fs::read_to_string(repo.join(file)).expect("readable");
            if !says_it_may_be_skipped(&text) {
                problems.push(format!(
                    "{number}: support file {file}: its `//!` header's first paragraph does not say why it may be skipped on first read"
                ));
            }
        }
    }
    println!("lessons: {lesson_total} lines of code; whole: {total} lines of code");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The lists are read from their marker lines: numbered lesson items, dashed support items.
#[test]
fn reading_lists_are_read_from_their_markers() {
    let workshop = "## Step 01: x\n\n**Lesson** — in order:\n\n1. `a.rs` — one\n2. `b.rs` — two\n\n**Support** — skip:\n\n- `c.rs` — three\n\n## Step 02: y\n";
    let lists = reading_lists(workshop, 1);
    assert_eq!(lists.lesson, ["a.rs", "b.rs"]);
    assert_eq!(lists.support, ["c.rs"]);
    assert!(says_it_may_be_skipped(
        "//! Support: x; skip it on first read.\n//!\n//! more"
    ));
    assert!(!says_it_may_be_skipped(
        "//! x.\n//!\n//! skip on first read"
    ));
}

/// The rows of WORKSHOP.md's table "One event, from the socket to its task": each row's
/// `file:function` (the function possibly `Type::function`).
fn event_way(workshop: &str) -> Vec<(String, String)> {
    let heading = "### One event, from the socket to its task";
    let Some(start) = workshop.find(heading) else {
        panic!("WORKSHOP.md has no section {heading:?}");
    };
    workshop[start..]
        .lines()
        .skip(1)
        .skip_while(|line| !line.starts_with('|'))
        .take_while(|line| line.starts_with('|'))
        .filter_map(|line| {
            let cell = line.split('|').nth(2)?.trim().strip_prefix('`')?;
            let (file, function) = cell.split('`').next()?.split_once(':')?;
            Some((file.to_string(), function.to_string()))
        })
        .collect()
}

/// The bodies of the functions called `name` that `text` defines (a declaration without a body,
/// as in a trait, is skipped): from the `{` after the signature to its match.
fn function_bodies<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
    let mut bodies = Vec::new();
    for opening in [format!("fn {name}("), format!("fn {name}<")] {
        for (at, _) in text.match_indices(&opening) {
            let rest = &text[at..];
            let Some(open) = rest.find(['{', ';']) else {
                continue;
            };
            if rest.as_bytes()[open] == b';' {
                continue;
            }
            let mut depth = 0usize;
            for (offset, c) in rest[open..].char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            bodies.push(&rest[open..open + offset + 1]);
                            break;
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    bodies
}

/// Whether `code` calls a function `name`: `name(`, `.name(`, `name::<`, not `other_name(`.
fn calls(code: &str, name: &str) -> bool {
    code.match_indices(name).any(|(at, _)| {
        let before = code[..at].chars().next_back();
        let after = &code[at + name.len()..];
        !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
            && (after.starts_with('(') || after.starts_with("::<"))
    })
}

/// How a row's function gets the event from the rows before it.
#[derive(Debug, PartialEq)]
enum Reached {
    /// The first row.
    Start,
    /// Called by this earlier row: the one above, or the one the rows between return to.
    CalledBy(String),
    /// Received from a channel the row above sends on (`send`, `send_replace`).
    Channel,
}

/// Each row's function is called by the row above it, or by the row that the rows between
/// return to (a call stack: a function that returns its result, such as `decode_line`, hands the
/// event back to its caller, which calls the next row); or it receives what the row above sends
/// on a channel (the watch's `mpsc`, the cluster's `watch`). Rows, in order: (function, body).
fn how_each_row_is_reached(rows: &[(String, String)]) -> Result<Vec<Reached>, String> {
    let mut reached = Vec::new();
    let mut stack: Vec<usize> = Vec::new();
    for (k, (function, body)) in rows.iter().enumerate() {
        let name = function.rsplit("::").next().unwrap_or(function);
        if k == 0 {
            reached.push(Reached::Start);
            stack.push(k);
            continue;
        }
        while stack
            .last()
            .is_some_and(|&caller| !calls(&rows[caller].1, name))
        {
            stack.pop();
        }
        match stack.last() {
            Some(&caller) => reached.push(Reached::CalledBy(rows[caller].0.clone())),
            None => {
                let above = &rows[k - 1].1;
                let sends = above.contains(".send(") || above.contains(".send_replace(");
                let receives = body.contains(".recv()") || body.contains(".changed()");
                if !(sends && receives) {
                    return Err(format!(
                        "row {}: {function} is called by no row above it still on the call stack, and does not receive from a channel {} sends on",
                        k + 1,
                        rows[k - 1].0
                    ));
                }
                reached.push(Reached::Channel);
            }
        }
        stack.push(k);
    }
    Ok(reached)
}

/// WORKSHOP.md's table "One event, from the socket to its task" is the way the code takes: every
/// row a function defined, once, where the row says, in a Lesson file of some step, and each
/// row reached from the rows above it by a call, a return to the caller, or a channel. No cap on
/// the rows: a way gets shorter when the code moves, not when the table leaves rows out.
#[test]
fn one_event_reaches_its_task_the_way_the_table_says() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let workshop = std::fs::read_to_string(repo.join("WORKSHOP.md")).expect("WORKSHOP.md");
    let way = event_way(&workshop);
    let lessons: BTreeSet<String> = (1..=6)
        .flat_map(|number| reading_lists(&workshop, number).lesson)
        .collect();
    let files: BTreeSet<&String> = way.iter().map(|(file, _)| file).collect();
    assert!(way.len() >= 2, "{} rows: {way:?}", way.len());
    let mut rows = Vec::new();
    for (file, function) in &way {
        assert!(lessons.contains(file), "{file} is on no step's Lesson list");
        let text = std::fs::read_to_string(repo.join(file)).expect("the file exists");
        let code = code_lines(&text).join("\n");
        let name = function.rsplit("::").next().unwrap_or(function);
        let bodies = function_bodies(&code, name);
        assert_eq!(
            bodies.len(),
            1,
            "{file} should define {function} once, with a body"
        );
        rows.push((function.clone(), bodies[0].to_string()));
    }
    let reached = how_each_row_is_reached(&rows).unwrap_or_else(|error| panic!("{error}"));
    for ((function, _), how) in rows.iter().zip(&reached) {
        println!("{function:>32}  {how:?}");
    }
    println!("{} functions through {} files", way.len(), files.len());
}

/// The way's checker follows calls down and back up, and channels; it refuses a row nobody
/// calls.
#[test]
fn the_way_is_checked_call_by_call() {
    let row = |function: &str, body: &str| (function.to_string(), body.to_string());
    let way = [
        row("outer", "{ let x = leaf(); next(x).await }"),
        row("leaf", "{ 1 }"),
        row("next", "{ self.sender.send(x).await }"),
        row(
            "Task::run",
            "{ while let Some(x) = events.recv().await { inner(x) } }",
        ),
        row("inner", "{ }"),
    ];
    assert_eq!(
        how_each_row_is_reached(&way),
        Ok(vec![
            Reached::Start,
            Reached::CalledBy("outer".into()),
            Reached::CalledBy("outer".into()),
            Reached::Channel,
            Reached::CalledBy("Task::run".into()),
        ])
    );
    let broken = [row("outer", "{ leaf() }"), row("other", "{ }")];
    assert!(how_each_row_is_reached(&broken).is_err());
    assert!(
        !calls("other_leaf(1)", "leaf")
            && calls("x.leaf(1)", "leaf")
            && calls("leaf::<T>()", "leaf")
    );
    let text = "trait T { fn take(&self); }\nimpl T for X { fn take(&self) { if a { b() } } }";
    assert_eq!(function_bodies(text, "take"), ["{ if a { b() } }"]);
}
