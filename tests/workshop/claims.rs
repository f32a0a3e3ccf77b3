//! The lists in WORKSHOP.md that the code can outgrow: every Event reason, phase and condition
//! type the operator writes is named in the step that teaches it, and every module header that
//! sends the reader to "step NN (\"a section\")" sends them to a section inside that step.
//!
//! WORKSHOP.md, "Introduction" (how to read it beside the code). Like `references.rs`, this reads
//! files and runs nothing.

use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn workshop() -> String {
    std::fs::read_to_string(repo().join("WORKSHOP.md")).expect("WORKSHOP.md is readable")
}

/// Every `.rs` file below `dir` (relative to the repository), with its text up to its unit tests.
fn sources(dir: &str) -> Vec<(String, String)> {
    fn collect(dir: &Path, files: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                collect(&path, files);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                files.push(path);
            }
        }
    }
    let mut files = Vec::new();
    collect(&repo().join(dir), &mut files);
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).expect("a source file is readable");
            let code = text
                .split("#[cfg(test)]")
                .next()
                .unwrap_or_default()
                .to_string();
            let name = path
                .strip_prefix(repo())
                .unwrap_or(&path)
                .display()
                .to_string();
            (name, code)
        })
        .collect()
}

/// The text of `## Step NN` up to the next heading of its level or above (outside code blocks).
fn step_section(workshop: &str, step: &str) -> String {
    let start = format!("## Step {step}");
    let mut lines = workshop
        .lines()
        .skip_while(|line| !line.starts_with(&start));
    let Some(first) = lines.next() else {
        panic!("WORKSHOP.md has no section {start:?}");
    };
    // A console block's `# terminal 2` is not a heading: count the fences.
    let mut in_code = false;
    let rest = lines.take_while(|line| {
        if line.starts_with("```") {
            in_code = !in_code;
        }
        in_code || !(line.starts_with("## ") || line.starts_with("# "))
    });
    std::iter::once(first)
        .chain(rest)
        .collect::<Vec<_>>()
        .join("\n")
}

/// The quoted words that follow each `marker` in `code`, e.g. every `"Promoted"` after
/// `EventType::Normal, `.
fn quoted_after(code: &str, marker: impl Fn(&str) -> Option<usize>) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(at) = marker(rest) {
        rest = &rest[at..];
        let after = rest.trim_start();
        if let Some(quoted) = after.strip_prefix('"') {
            if let Some(end) = quoted.find('"') {
                found.push(quoted[..end].to_string());
            }
        }
        rest = after;
    }
    found
}

/// Each value the operator writes, with the step whose section must name it: what lives under
/// `src/backups/` is step 06's, the rest step 04's.
fn written(extract: impl Fn(&str) -> Vec<String>) -> Vec<(String, &'static str, String)> {
    let mut values = Vec::new();
    for dir in ["src/postgres", "src/backups"] {
        let step = if dir == "src/backups" { "06" } else { "04" };
        for (file, code) in sources(dir) {
            for value in extract(&code) {
                if !values.iter().any(|(v, _, _): &(String, _, _)| *v == value) {
                    values.push((value, step, file.clone()));
                }
            }
        }
    }
    values
}

/// Every value of `values` appears in backticks in the section of its step.
fn assert_named(kind: &str, values: &[(String, &'static str, String)]) {
    assert!(
        !values.is_empty(),
        "no {kind} found in the code: the scan is broken"
    );
    let workshop = workshop();
    let missing: Vec<String> = values
        .iter()
        .filter(|(value, step, _)| !step_section(&workshop, step).contains(&format!("`{value}`")))
        .map(|(value, step, file)| format!("{kind} `{value}` ({file}) is not named in step {step}"))
        .collect();
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

/// `EventType::Warning, "PrimaryLost"`: the reason after an event's type, in a call or a table.
fn event_reasons(code: &str) -> Vec<String> {
    let mut reasons = Vec::new();
    for kind in ["EventType::Normal,", "EventType::Warning,"] {
        reasons.extend(quoted_after(code, |rest| {
            rest.find(kind).map(|at| at + kind.len())
        }));
    }
    reasons
}

#[test]
fn every_event_reason_is_named_in_its_step() {
    assert_named("Event reason", &written(event_reasons));
}

#[test]
fn every_phase_is_named_in_its_step() {
    let phases = written(|code| {
        let mut phases = Vec::new();
        for line in code.lines().filter(|line| line.contains("const PHASE_")) {
            phases.extend(quoted_after(line, |rest| rest.find('=').map(|at| at + 1)));
        }
        phases
    });
    assert_named("phase", &phases);
}

#[test]
fn every_condition_type_is_named_in_its_step() {
    let types = written(|code| {
        let mut types = quoted_after(code, |rest| {
            rest.find("condition(").map(|at| at + "condition(".len())
        });
        for line in code
            .lines()
            .filter(|line| line.contains("_CONDITION: &str"))
        {
            types.extend(quoted_after(line, |rest| rest.find('=').map(|at| at + 1)));
        }
        types
    });
    assert_named("condition type", &types);
}

/// `WORKSHOP.md, step 04 ("The reconcile loop")` in a module header: the step and the section.
fn cited_step_sections(header: &str) -> Vec<(String, String)> {
    let flat = header.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut cited = Vec::new();
    for (at, _) in flat.match_indices("WORKSHOP.md, step ") {
        let rest = &flat[at + "WORKSHOP.md, step ".len()..];
        let step: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let after = rest[step.len()..].trim_start();
        if let Some(title) = after.strip_prefix("(\"") {
            if let Some(end) = title.find('"') {
                cited.push((step, title[..end].to_string()));
            }
        }
    }
    cited
}

/// A heading (`### Title (...)`, `### Title: ...`) or a bold paragraph or list item
/// (`**Title.**`, `- **Title**`) of that name in `section`.
fn has_section(section: &str, title: &str) -> bool {
    section.lines().any(|line| {
        let heading = line.trim_start_matches('#').trim();
        let named = heading == title
            || heading.starts_with(&format!("{title} ("))
            || heading.starts_with(&format!("{title}: "));
        (line.starts_with('#') && named)
            || line.starts_with(&format!("**{title}"))
            || line.starts_with(&format!("- **{title}"))
    })
}

#[test]
fn module_headers_send_the_reader_to_a_section_of_the_step_they_name() {
    let workshop = workshop();
    let mut wrong = Vec::new();
    let mut checked = 0;
    for dir in ["src", "stages"] {
        for (file, code) in sources(dir) {
            let header: String = code
                .lines()
                .take_while(|line| line.starts_with("//!"))
                .map(|line| line.trim_start_matches("//!"))
                .collect::<Vec<_>>()
                .join(" ");
            for (step, title) in cited_step_sections(&header) {
                checked += 1;
                if !has_section(&step_section(&workshop, &step), &title) {
                    wrong.push(format!(
                        "{file}: \"{title}\" is not a section of step {step}"
                    ));
                }
            }
        }
    }
    assert!(
        checked > 10,
        "only {checked} headers cite a step's section: the scan is broken"
    );
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn citations_are_read_from_headers_that_wrap() {
    assert_eq!(
        cited_step_sections(" WORKSHOP.md, step 02 (\"Chunks are\n not events\"). A watch"),
        vec![("02".to_string(), "Chunks are not events".to_string())]
    );
    assert!(has_section(
        "### One cache, not two (`src/watch/store.rs`)",
        "One cache, not two"
    ));
    assert!(has_section(
        "**When the server says no.** Every",
        "When the server says no"
    ));
    assert_eq!(
        event_reasons("self.event(\n  EventType::Warning,\n  \"PrimaryLost\",\n)"),
        vec!["PrimaryLost".to_string()]
    );
}
