//! The driver's layers run one way: no import circle among driver/src's files spans more
//! than one folder (a top-level module: `cache/`, `execute/`, `device.rs`, ...). Files
//! are read as text: every `crate::`, `super::` and `self::` path (in `use` items, with
//! their brace groups expanded, and inline) and every `use child::...` of a declared
//! child module is an edge to the file that defines the module it names; `#[cfg(test)]`
//! items are left out (a test may reach anywhere). A circle is a strongly connected
//! component of that graph.
//!
//! `hal/` is the bottom: its files name no module outside it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The room of a module: its top-level folder (`lib` for lib.rs).
fn room(m: &[String]) -> &str {
    m.first().map_or("lib", |f| f.as_str())
}

/// Every `.rs` file under `dir`, with its module path (`["cache", "load"]`).
fn sources(root: &Path, dir: &Path, out: &mut Vec<(Vec<String>, PathBuf)>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n == "bin") {
                continue; // the CLI is another crate over the library
            }
            sources(root, &p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            let rel = p.strip_prefix(root).unwrap().with_extension("");
            let mut module: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if module.last().is_some_and(|l| l == "mod" || l == "lib") {
                module.pop();
            }
            out.push((module, p));
        }
    }
}

/// The text without comments, string literals and `#[cfg(test)]` items.
fn strip(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            i += 2;
            while i < b.len() && !b[i..].starts_with(b"*/") {
                i += 1;
            }
            i += 2;
        } else if b[i..].starts_with(b"r#\"") {
            // A raw string: to its `"#`.
            i += 3;
            while i < b.len() && !b[i..].starts_with(b"\"#") {
                i += 1;
            }
            i += 2;
            out.push_str("\"\"");
        } else if b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if b[i] == b'\'' && i + 2 < b.len() && (b[i + 2] == b'\'' || b[i + 1] == b'\\') {
            // A char literal ('x', '\n', '\''); a lifetime has no closing quote.
            i += if b[i + 1] == b'\\' { 4 } else { 3 };
            while i < b.len() && b[i - 1] != b'\'' {
                i += 1;
            }
        } else {
            out.push(b[i] as char);
            i += 1;
        }
    }
    drop_cfg_test(&out)
}

/// Removes each `#[cfg(test)]` item (up to its `;` or its balanced braces).
fn drop_cfg_test(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let item = &rest[at..];
        let (mut depth, mut end) = (0usize, item.len());
        for (k, c) in item.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = k + 1;
                        break;
                    }
                }
                ';' if depth == 0 => {
                    end = k + 1;
                    break;
                }
                _ => {}
            }
        }
        rest = &item[end..];
    }
    out.push_str(rest);
    out
}

/// The paths of a `use` tree (`a::{b, c::{d, e}}` gives `a::b`, `a::c::d`, `a::c::e`).
fn expand(tree: &str) -> Vec<Vec<String>> {
    let tree = tree.split_whitespace().collect::<Vec<_>>().join(" ");
    let Some(open) = tree.find('{') else {
        let path = tree.split(" as ").next().unwrap_or("").replace(' ', "");
        return vec![segments(&path)];
    };
    let prefix = segments(tree[..open].replace(' ', "").trim_end_matches("::"));
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let (mut parts, mut depth, mut start) = (Vec::new(), 0, 0);
    for (k, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..k]);
                start = k + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
        .into_iter()
        .filter(|p| !p.is_empty())
        .flat_map(|p| {
            expand(p).into_iter().map(|tail| {
                let mut full = prefix.clone();
                full.extend(tail.into_iter().filter(|s| s != "self"));
                full
            })
        })
        .collect()
}

fn segments(path: &str) -> Vec<String> {
    path.split("::")
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect()
        })
        .collect()
}

/// Every module path the file's text names: `use` trees and inline paths.
fn named_paths(text: &str) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("use ") {
        let before = rest[..at].chars().last();
        rest = &rest[at + 4..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let end = rest.find(';').unwrap_or(rest.len());
        paths.extend(expand(&rest[..end]));
        rest = &rest[end..];
    }
    for root in ["crate::", "super::", "self::"] {
        let mut rest = text;
        while let Some(at) = rest.find(root) {
            let before = rest[..at].chars().last();
            let tail = &rest[at..];
            let end = tail
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .unwrap_or(tail.len());
            if !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                paths.push(segments(&tail[..end]));
            }
            rest = &tail[root.len()..];
        }
    }
    paths
}

/// The driver's module graph: each file and the files it names.
fn graph() -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&root, &root, &mut files);
    let modules: BTreeSet<Vec<String>> = files.iter().map(|(m, _)| m.clone()).collect();
    let mut edges = BTreeMap::new();
    for (module, path) in &files {
        let text = strip(&std::fs::read_to_string(path).unwrap());
        let mut to = BTreeSet::new();
        for p in named_paths(&text) {
            let Some(first) = p.first() else { continue };
            let mut abs = match first.as_str() {
                "crate" => p[1..].to_vec(),
                "super" => {
                    let mut base = module.clone();
                    let mut k = 0;
                    while p.get(k).is_some_and(|s| s == "super") {
                        base.pop();
                        k += 1;
                    }
                    base.extend_from_slice(&p[k..]);
                    base
                }
                "self" => [module.clone(), p[1..].to_vec()].concat(),
                // `use child::...` of a child module declared here.
                _ => {
                    let child = [module.clone(), vec![first.clone()]].concat();
                    if !modules.contains(&child) {
                        continue;
                    }
                    [child, p[1..].to_vec()].concat()
                }
            };
            // The longest prefix that is a file of ours.
            while !abs.is_empty() && !modules.contains(&abs) {
                abs.pop();
            }
            if !abs.is_empty() && &abs != module {
                to.insert(abs);
            }
        }
        edges.insert(module.clone(), to);
    }
    edges
}

/// Strongly connected components of more than one file (Tarjan's algorithm).
fn circles(g: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Vec<Vec<Vec<String>>> {
    struct State<'a> {
        g: &'a BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        index: BTreeMap<&'a Vec<String>, usize>,
        low: BTreeMap<&'a Vec<String>, usize>,
        stack: Vec<&'a Vec<String>>,
        on: BTreeSet<&'a Vec<String>>,
        out: Vec<Vec<Vec<String>>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a Vec<String>) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on.insert(v);
        for w in s.g.get(v).into_iter().flatten() {
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if s.on.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on.remove(w);
                comp.push(w.clone());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                s.out.push(comp);
            }
        }
    }
    let mut s = State {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in g.keys() {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.out
}

fn name(m: &[String]) -> String {
    match m.is_empty() {
        true => "lib".into(),
        false => m.join("/"),
    }
}

#[test]
fn no_import_circle_spans_folders() {
    let g = graph();
    assert!(g.len() > 50, "the driver's sources were not found");
    let crossing: Vec<String> = circles(&g)
        .into_iter()
        .filter(|c| {
            let rooms: BTreeSet<&str> = c.iter().map(|m| room(m)).collect();
            rooms.len() > 1
        })
        .map(|c| c.iter().map(|m| name(m)).collect::<Vec<_>>().join(", "))
        .collect();
    assert!(
        crossing.is_empty(),
        "import circles across folders:\n{}",
        crossing.join("\n")
    );
}

/// The bottom layer: HAL types, their errors and their own checks import nothing above.
#[test]
fn hal_imports_nothing_above_it() {
    let g = graph();
    let upward: Vec<String> = g
        .iter()
        .filter(|(from, _)| room(from) == "hal")
        .flat_map(|(from, to)| {
            to.iter()
                .filter(|t| room(t) != "hal")
                .map(move |t| format!("{} -> {}", name(from), name(t)))
        })
        .collect();
    assert!(g.keys().any(|m| room(m) == "hal"), "hal/ was not found");
    assert!(
        upward.is_empty(),
        "hal/ imports upward:\n{}",
        upward.join("\n")
    );
}

/// The checker itself: a circle through two folders is found, one inside a folder is not.
#[test]
fn the_checker_sees_a_circle_across_folders() {
    let mut g = BTreeMap::new();
    let m = |s: &str| s.split('/').map(String::from).collect::<Vec<_>>();
    g.insert(m("a/x"), BTreeSet::from([m("b/y")]));
    g.insert(m("b/y"), BTreeSet::from([m("b/z")]));
    g.insert(m("b/z"), BTreeSet::from([m("a/x")]));
    g.insert(m("c/p"), BTreeSet::from([m("c/q")]));
    g.insert(m("c/q"), BTreeSet::from([m("c/p")]));
    let found = circles(&g);
    assert_eq!(found.len(), 2);
    assert!(found.contains(&vec![m("a/x"), m("b/y"), m("b/z")]));
    let text = "use crate::{a::{b, c::D as E}, e};\nfn f() { super::g::h(); crate::k::l }\n\
                #[cfg(test)]\nmod tests { use crate::t; }";
    let paths = named_paths(&strip(text));
    for want in [
        vec!["crate", "a", "b"],
        vec!["crate", "a", "c", "D"],
        vec!["crate", "e"],
        vec!["super", "g", "h"],
        vec!["crate", "k", "l"],
    ] {
        let want: Vec<String> = want.into_iter().map(String::from).collect();
        assert!(paths.contains(&want), "{want:?} missing from {paths:?}");
    }
    assert!(!paths.iter().any(|p| p.contains(&"t".to_string())));
}
