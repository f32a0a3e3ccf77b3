//! WORKSHOP.md and the code agree wherever a learner looks: every Rust snippet is an anchored
//! region of the file it names, every file it names exists, every test and function it names is
//! defined, and every WORKSHOP.md section the code cites exists.
//!
//! WORKSHOP.md, "Introduction" (how to read it beside the code). The shell transcripts are re-run
//! by `tests/workshop/transcripts.rs`; this file checks the rest of the text, without running
//! anything.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn workshop() -> String {
    std::fs::read_to_string(repo().join("WORKSHOP.md")).expect("WORKSHOP.md is readable")
}

/// Every `.rs` file of both crates (library, stages, binaries, tests, benches).
fn rust_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    for top in [
        "src",
        "stages",
        "tests",
        "benches",
        "sandbox/src",
        "sandbox/tests",
    ] {
        collect_rust_files(&repo().join(top), &mut files);
    }
    files.sort();
    files
}

fn collect_rust_files(dir: &Path, files: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect_rust_files(&path, files);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            files.push(path);
        }
    }
}

fn all_rust_source() -> String {
    rust_files()
        .iter()
        .filter_map(|path| std::fs::read_to_string(path).ok())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The text between backticks on one line of prose (code blocks excluded by the caller).
fn backticked(line: &str) -> Vec<&str> {
    line.split('`').skip(1).step_by(2).collect()
}

/// Prose lines: everything outside fenced code blocks, with their line numbers.
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut inside = false;
    let mut lines = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            inside = !inside;
            continue;
        }
        if !inside {
            lines.push((index + 1, line));
        }
    }
    lines
}

fn without_whitespace(text: &str) -> String {
    text.chars().filter(|c| !c.is_whitespace()).collect()
}

/// Every ```rust block of WORKSHOP.md is cut from the code: it sits under a
/// `<!-- snippet: FILE#NAME -->` line, and `anchored_snippets_are_their_regions` holds it to the
/// region `// ANCHOR: NAME` … `// ANCHOR_END: NAME` of FILE.
#[test]
fn every_rust_snippet_is_anchored() {
    let text = workshop();
    let lines: Vec<&str> = text.lines().collect();
    let mut snippets = 0;
    let unanchored: Vec<String> = lines
        .iter()
        .enumerate()
        .filter(|(_, line)| line.trim() == "```rust")
        .inspect(|_| snippets += 1)
        .filter(|(index, _)| snippet_marker(index.checked_sub(1).map(|i| lines[i])).is_none())
        .map(|(index, _)| format!("WORKSHOP.md:{}", index + 1))
        .collect();
    assert!(snippets > 0, "WORKSHOP.md has no Rust snippet");
    assert!(
        unanchored.is_empty(),
        "Rust snippets with no `<!-- snippet: FILE#NAME -->` line above them: {}",
        unanchored.join(", ")
    );
}

/// `<!-- snippet: src/file.rs#name -->`, the line right above an anchored snippet: the file and
/// the name of its `// ANCHOR: name` region.
fn snippet_marker(line: Option<&str>) -> Option<(String, String)> {
    let inner = line?
        .trim()
        .strip_prefix("<!-- snippet:")?
        .strip_suffix("-->")?
        .trim();
    let (file, name) = inner.split_once('#')?;
    Some((file.to_string(), name.to_string()))
}

/// The code between `// ANCHOR: name` and `// ANCHOR_END: name` in `code` (mdBook's convention),
/// without the marker lines of other regions nested in it. None: no such region.
fn anchored_region(code: &str, name: &str) -> Option<String> {
    let start = format!("// ANCHOR: {name}");
    let end = format!("// ANCHOR_END: {name}");
    let mut lines = code.lines();
    lines.find(|line| line.trim() == start)?;
    let mut region = String::new();
    for line in lines {
        // The end may close a line of code too (`} // ANCHOR_END: name`, as rustfmt places it).
        if let Some(code) = line.trim_end().strip_suffix(&end) {
            region.push_str(code);
            return Some(region);
        }
        if !line.trim_start().starts_with("// ANCHOR") {
            region.push_str(line);
            region.push('\n');
        }
    }
    None
}

/// The snippet is the whole region: its first piece opens it, its last closes it, and between
/// them only what a `/* ... */` marks is left out (whitespace ignored).
fn snippet_is_region(snippet: &str, region: &str) -> bool {
    let region = without_whitespace(region);
    let pieces = snippet_pieces(snippet);
    let (Some(first), Some(last)) = (pieces.first(), pieces.last()) else {
        return false;
    };
    if !region.starts_with(first.as_str()) || !region.ends_with(last.as_str()) {
        return false;
    }
    if pieces.len() == 1 {
        return region == *first;
    }
    let mut from = first.len();
    for piece in &pieces[1..pieces.len() - 1] {
        match region[from..].find(piece.as_str()) {
            Some(at) => from += at + piece.len(),
            None => return false,
        }
    }
    from <= region.len() - last.len()
}

/// A snippet's pieces between its elisions, whitespace dropped, empty ones left out.
fn snippet_pieces(snippet: &str) -> Vec<String> {
    let mut pieces = Vec::new();
    let mut rest = snippet;
    while let Some(start) = rest.find("/* ...") {
        pieces.push(without_whitespace(&rest[..start]));
        rest = match rest[start..].find("*/") {
            Some(end) => &rest[start + end + 2..],
            None => "",
        };
    }
    pieces.push(without_whitespace(rest));
    pieces.retain(|piece| !piece.is_empty());
    pieces
}

/// Each step opens with its idea and a snippet of its normal path, before its reading lists:
/// a ```rust block under a `<!-- snippet: FILE#NAME -->` line, 15 to 30 lines, that is the
/// region `// ANCHOR: NAME` … `// ANCHOR_END: NAME` of FILE (elisions marked `/* ... */`). Every
/// anchored snippet in WORKSHOP.md is held to its region, and every region in the code is shown.
#[test]
fn anchored_snippets_are_their_regions() {
    let text = workshop();
    let lines: Vec<&str> = text.lines().collect();
    let mut problems = Vec::new();
    let mut shown = BTreeSet::new();
    for (index, line) in lines.iter().enumerate() {
        let Some((file, name)) = snippet_marker(Some(line)) else {
            continue;
        };
        shown.insert((file.clone(), name.clone()));
        if lines.get(index + 1).map(|l| l.trim()) != Some("```rust") {
            problems.push(format!(
                "WORKSHOP.md:{}: a snippet marker not followed by ```rust",
                index + 1
            ));
            continue;
        }
        let block: Vec<&str> = lines[index + 2..]
            .iter()
            .take_while(|l| !l.trim_start().starts_with("```"))
            .copied()
            .collect();
        let snippet = block.join("\n");
        let code = std::fs::read_to_string(repo().join(&file)).unwrap_or_default();
        match anchored_region(&code, &name) {
            None => problems.push(format!(
                "WORKSHOP.md:{}: {file} has no region `// ANCHOR: {name}` … `// ANCHOR_END: {name}`",
                index + 1
            )),
            Some(region) if !snippet_is_region(&snippet, &region) => problems.push(format!(
                "WORKSHOP.md:{}: the snippet differs from {file}#{name}; the region is now:\n{region}",
                index + 1
            )),
            Some(_) => {}
        }
    }
    for step in 1..=5 {
        let heading = format!("## Step {step:02}:");
        let Some(start) = lines.iter().position(|l| l.starts_with(&heading)) else {
            problems.push(format!("WORKSHOP.md has no {heading}"));
            continue;
        };
        let section: Vec<&str> = lines[start + 1..]
            .iter()
            .take_while(|l| !l.starts_with("## "))
            .copied()
            .collect();
        let marker = section
            .iter()
            .position(|l| snippet_marker(Some(l)).is_some());
        let lesson = section.iter().position(|l| l.starts_with("**Lesson**"));
        let first_fence = section
            .iter()
            .position(|l| l.trim_start().starts_with("```"));
        match (marker, lesson) {
            (Some(marker), Some(lesson)) if marker < lesson && first_fence == Some(marker + 1) => {
                let length = section[marker + 2..]
                    .iter()
                    .take_while(|l| !l.trim_start().starts_with("```"))
                    .count();
                if !(15..=30).contains(&length) {
                    problems.push(format!(
                        "{heading} its opening snippet is {length} lines, not 15 to 30"
                    ));
                }
            }
            _ => problems.push(format!(
                "{heading} does not open with an anchored snippet before its **Lesson** list"
            )),
        }
    }
    for file in rust_files() {
        let code = std::fs::read_to_string(&file).unwrap_or_default();
        let relative = file
            .strip_prefix(repo())
            .expect("in the repository")
            .to_string_lossy()
            .into_owned();
        for line in code.lines() {
            if let Some(name) = line.trim().strip_prefix("// ANCHOR: ") {
                if !shown.contains(&(relative.clone(), name.to_string())) {
                    problems.push(format!("{relative}: region {name} is shown nowhere"));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn a_snippet_is_its_whole_region_with_marked_elisions() {
    let code = "x\n// ANCHOR: r\nlet a = 1;\n// ANCHOR: inner\nlet b = 2;\n// ANCHOR_END: inner\nrun(a, b);\n// ANCHOR_END: r\ny\n";
    let region = anchored_region(code, "r").expect("the region");
    assert_eq!(region, "let a = 1;\nlet b = 2;\nrun(a, b);\n");
    let closing = "// ANCHOR: c\nif x {\n    y();\n} // ANCHOR_END: c\n";
    assert_eq!(
        anchored_region(closing, "c").expect("c"),
        "if x {\n    y();\n} "
    );
    assert!(snippet_is_region(
        "let a = 1;\nlet b = 2;\nrun(a, b);",
        &region
    ));
    assert!(snippet_is_region(
        "let a = 1;\n/* ... */\nrun(a, b);",
        &region
    ));
    // A piece missing at either end, or a line left out unmarked, is a difference.
    assert!(!snippet_is_region("let b = 2;\nrun(a, b);", &region));
    assert!(!snippet_is_region("let a = 1;\nlet b = 2;", &region));
    assert!(!snippet_is_region("let a = 1;\nrun(a, b);", &region));
    assert_eq!(
        snippet_marker(Some("<!-- snippet: src/a.rs#r -->")),
        Some(("src/a.rs".to_string(), "r".to_string()))
    );
}

/// Every file WORKSHOP.md names in backticks exists: paths from the top of the repository, and
/// bare file names (`frame.rs`) somewhere in either crate.
#[test]
fn every_file_named_exists() {
    let text = workshop();
    let files = rust_files();
    let mut problems = Vec::new();
    for (number, line) in prose_lines(&text) {
        // Documents are named with or without backticks ("see watch-semantics.md").
        let documents = line
            .split(|c: char| c.is_whitespace() || "(),;`".contains(c))
            .filter(|word| word.ends_with(".md") && !word.contains(' '));
        for name in backticked(line).into_iter().chain(documents) {
            let name = name.trim_end_matches(['/', ',']);
            // `file.rs:function`, a place in a file: the file must exist.
            let name = name
                .split_once(".rs:")
                .map_or(name, |(file, _)| &name[..file.len() + 3]);
            let looks_like_file = [".rs", ".md", ".yaml", ".toml"]
                .iter()
                .any(|ext| name.ends_with(ext))
                && !name.contains(' ')
                && !name.contains('*');
            let looks_like_dir = ["src/", "stages/", "tests/", "sandbox/", "kube/", "benches/"]
                .iter()
                .any(|top| name.starts_with(top))
                && !name.contains(' ');
            if !(looks_like_file || looks_like_dir) {
                continue;
            }
            let exists = if name.contains('/') {
                // From the top of the repository, or the tail of a path (`crd/mod.rs`).
                repo().join(name).exists() || files.iter().any(|file| file.ends_with(name))
            } else {
                repo().join(name).exists()
                    || files
                        .iter()
                        .any(|file| file.file_name().is_some_and(|f| f == name))
            };
            if !exists {
                problems.push(format!("WORKSHOP.md:{number}: `{name}` does not exist"));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Every test WORKSHOP.md names (`file::test_name`, `file::{a, b}`, or a bare
/// `a_long_test_name`) and every `Type::function` it names is defined in the code.
#[test]
fn every_test_and_function_named_is_defined() {
    let text = workshop();
    let source = all_rust_source();
    let defined = |name: &str| {
        source.contains(&format!("fn {name}(")) || source.contains(&format!("fn {name}<"))
    };
    let mut problems = BTreeSet::new();
    for (number, line) in prose_lines(&text) {
        for token in backticked(line) {
            let token = token.trim_end_matches("()");
            // Other crates' items (`tokio::time::timeout`) are not ours to define.
            let external = [
                "std::",
                "tokio::",
                "serde::",
                "serde_json::",
                "hyper::",
                "http::",
            ];
            if external.iter().any(|krate| token.starts_with(krate)) {
                continue;
            }
            for name in named_functions(token) {
                if !defined(&name) {
                    problems.insert(format!(
                        "WORKSHOP.md:{number}: `{token}` names `{name}`, which no .rs file defines"
                    ));
                }
            }
        }
    }
    assert!(
        problems.is_empty(),
        "{}",
        problems.into_iter().collect::<Vec<_>>().join("\n")
    );
}

/// The functions a backticked token names: the last segment of a path whose last segment is
/// snake_case (`Controller::handle_event`, `watch::byte_level::{a, b}`), or a bare snake_case name with
/// three or more underscores (how our tests are named).
fn named_functions(token: &str) -> Vec<String> {
    let is_snake = |word: &str| {
        !word.is_empty()
            && word
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            && word.starts_with(|c: char| c.is_ascii_lowercase())
    };
    if token.contains(' ') && !token.contains("::{") {
        return Vec::new();
    }
    if let Some((_, list)) = token.split_once("::{") {
        return list
            .trim_end_matches('}')
            .split(',')
            .map(str::trim)
            .filter(|word| is_snake(word))
            .map(str::to_string)
            .collect();
    }
    let segments: Vec<&str> = token.split("::").collect();
    let last = segments.last().copied().unwrap_or_default();
    if segments.len() >= 2 && is_snake(last) {
        return vec![last.to_string()];
    }
    if segments.len() == 1 && is_snake(last) && last.matches('_').count() >= 3 {
        return vec![last.to_string()];
    }
    Vec::new()
}

#[test]
fn function_names_are_read_from_paths_lists_and_long_names() {
    assert_eq!(
        named_functions("Controller::handle_event"),
        vec!["handle_event"]
    );
    assert_eq!(
        named_functions("watch::byte_level::{a_b, c_d}"),
        vec!["a_b", "c_d"]
    );
    assert_eq!(
        named_functions("full_channel_never_blocks"),
        vec!["full_channel_never_blocks"]
    );
    assert!(named_functions("spec.size").is_empty());
    assert!(named_functions("ClusterEvent::Modify").is_empty());
    assert!(named_functions("watch::errors::*").is_empty());
}

/// Where the code cites a WORKSHOP.md section by name (`WORKSHOP.md, "Set-up: the sandbox"` or
/// `WORKSHOP.md, step 02 ("Decoding an event")`), a heading of that name exists, or a paragraph
/// that opens with it in bold. A name may join a section and its subsection with ": "
/// ("Set-up: the sandbox").
#[test]
fn every_section_the_code_cites_exists() {
    let text = workshop();
    let mut headings: Vec<String> = Vec::new();
    let mut parents: Vec<String> = Vec::new();
    for line in prose_lines(&text).into_iter().map(|(_, line)| line) {
        // A paragraph or list item that opens in bold (`**When the server says no.**`) is a
        // named part of its section, one level below it.
        let lead = line.trim_start_matches("- ").strip_prefix("**");
        if let Some(lead) = lead
            .and_then(|rest| rest.split_once("**"))
            .map(|(lead, _)| lead)
        {
            let lead = normalise(lead.trim_end_matches(['.', ':']));
            for parent in parents.iter().filter(|p| !p.is_empty()) {
                headings.push(format!("{parent}: {lead}"));
            }
            headings.push(lead);
            continue;
        }
        if !line.starts_with('#') {
            continue;
        }
        let level = line.chars().take_while(|c| *c == '#').count();
        let title = normalise(line.trim_start_matches('#'));
        parents.truncate(level.saturating_sub(1));
        while parents.len() < level.saturating_sub(1) {
            parents.push(String::new());
        }
        for parent in parents.iter().filter(|p| !p.is_empty()) {
            headings.push(format!("{parent}: {title}"));
        }
        headings.push(title.clone());
        parents.push(title);
    }
    let mut problems = Vec::new();
    for file in rust_files() {
        let code = std::fs::read_to_string(&file).unwrap_or_default();
        for (number, line) in code.lines().enumerate() {
            // Citations live in comments; string literals that mention the file are not ones.
            if !line.trim_start().starts_with("//") {
                continue;
            }
            let Some(at) = line.find("WORKSHOP.md") else {
                continue;
            };
            for name in line[at..].split('"').skip(1).step_by(2) {
                let name = normalise(name);
                if !headings.iter().any(|heading| heading.starts_with(&name)) {
                    problems.push(format!(
                        "{}:{}: cites WORKSHOP.md section \"{name}\", which has no heading",
                        file.strip_prefix(repo()).unwrap_or(&file).display(),
                        number + 1
                    ));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Lower case, backticks dropped, spaces collapsed: how headings and citations are compared.
fn normalise(title: &str) -> String {
    title
        .replace('`', "")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

/// The code points only at what a clone of this repository holds: no paths into the machine it
/// was written on, or into documents that live beside the repository.
#[test]
fn the_code_cites_nothing_outside_the_repository() {
    let outside = ["/work/", "../shared/", "shared/reference/"];
    let mut problems = Vec::new();
    for file in rust_files() {
        if file.ends_with("tests/workshop/references.rs") {
            continue;
        }
        let code = std::fs::read_to_string(&file).unwrap_or_default();
        for (number, line) in code.lines().enumerate() {
            if outside.iter().any(|path| line.contains(path)) {
                problems.push(format!(
                    "{}:{}: {}",
                    file.strip_prefix(repo()).unwrap_or(&file).display(),
                    number + 1,
                    line.trim()
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The keys of a JSON object (the properties of a schema).
fn keys(object: &serde_json::Value) -> Vec<&String> {
    let object = object.as_object();
    object.expect("a JSON object").keys().collect()
}

/// Step 01's prose lists the CRD's spec and status fields and kubectl's columns: each list names
/// exactly what `postgres_cluster_crd()` declares, so a field or column added to the code cannot
/// go unmentioned (nor a removed one stay in the text).
#[test]
fn step_01_lists_the_crds_fields_and_columns() {
    let text = workshop();
    let start = text.find("## Step 01:").expect("a Step 01 section");
    let section = &text[start..];
    let section = &section[..section[3..]
        .find("\n## ")
        .map_or(section.len(), |end| end + 3)];
    let crd = postgres_operator::crd::postgres_cluster_crd();
    let version = &crd["spec"]["versions"][0];
    let properties = &version["schema"]["openAPIV3Schema"]["properties"];
    let mut problems = Vec::new();
    for field in keys(&properties["spec"]["properties"]) {
        if !section.contains(&format!("`spec.{field}`")) {
            problems.push(format!("spec.{field} is not named in step 01"));
        }
    }
    let status_list = section
        .split_once("`status` with ")
        .map(|(_, rest)| rest.split(";\n").next().unwrap_or_default())
        .expect("step 01 lists the status fields after \"`status` with \"");
    for field in keys(&properties["status"]["properties"]) {
        if !status_list.contains(&format!("`{field}`")) {
            problems.push(format!("status.{field} is not in step 01's status list"));
        }
    }
    let columns: Vec<String> = version["additionalPrinterColumns"]
        .as_array()
        .expect("printer columns")
        .iter()
        .map(|column| column["name"].as_str().unwrap_or_default().to_uppercase())
        .collect();
    let shown = section
        .split_once("`kubectl get pgc` shows ")
        .map(|(_, rest)| rest.split(';').next().unwrap_or_default())
        .expect("step 01 lists the columns after \"`kubectl get pgc` shows \"");
    let listed: Vec<String> = shown
        .replace(" and ", ", ")
        .split(',')
        .map(|name| {
            name.split('(')
                .next()
                .unwrap_or_default()
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        })
        .filter(|name| !name.is_empty())
        .collect();
    if listed != columns {
        problems.push(format!(
            "step 01 lists the columns {listed:?}; the CRD has {columns:?}"
        ));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
