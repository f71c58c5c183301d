//! The crate's layering, read from its sources: every path to another file of the crate
//! counts, in a `use` or written out in the code (`crate::redis::startup::debug_commands()`),
//! `crate::`, `super::`, `self::` and a child module's own name (`mod x;` then `x::f()`)
//! alike, so that a loop no `use` line shows is still found.
//!
//! - No file depends on another that depends back on it, directly or through others:
//!   every edge counts, a parent's to its children (a `pub use` of one, a call into one)
//!   and a child's to its parent alike, so that what both need lives in a file of its own.
//!   A method call counts too: `self.f()` in an `impl T` (or `impl X for T`) block reaches
//!   the file whose inherent `impl T` defines `f`, though no path names it (a type whose
//!   methods are spread over several files is otherwise a loop no `use` shows).
//! - The modules point one way: `core` uses nothing of `redis`, `commands`, `options` or
//!   `error`; `redis` (the FFI layer) uses nothing of `commands` or `options`; `options` and
//!   `error` use nothing of `redis` or `commands`.
//! - Only `src/redis/api.rs` names a `RedisModule_*` function, and `unsafe` lives in
//!   `src/redis/` only.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, as module paths (`core::engine::store`) to their text.
fn sources(dir: &Path) -> BTreeMap<Vec<String>, String> {
    let mut files = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(path) = stack.pop() {
        for entry in fs::read_dir(&path).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                files.insert(module_path(dir, &path), fs::read_to_string(&path).unwrap());
            }
        }
    }
    files
}

/// `src/core/engine/store.rs` as `["core", "engine", "store"]`; `lib.rs` and `mod.rs` name
/// their directory.
fn module_path(root: &Path, file: &Path) -> Vec<String> {
    let relative: PathBuf = file.strip_prefix(root).unwrap().with_extension("");
    let mut parts: Vec<String> = relative
        .components()
        .map(|part| part.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

/// The text of `source` without comments and string literals, which name paths they do
/// not use.
fn code_only(source: &str) -> String {
    let mut code = String::with_capacity(source.len());
    for line in source.lines() {
        let line = match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        };
        let mut in_string = false;
        let mut escaped = false;
        for character in line.chars() {
            if in_string {
                if escaped {
                    escaped = false;
                } else if character == '\\' {
                    escaped = true;
                } else if character == '"' {
                    in_string = false;
                }
                continue;
            }
            if character == '"' {
                in_string = true;
                continue;
            }
            code.push(character);
        }
        code.push('\n');
    }
    code
}

/// `code` with each path that starts at one of its file's child modules (`mod x;`, then
/// `x::f()` or `use x::Y`) written from `self::`, as the other relative paths are.
fn children_qualified(code: &str) -> String {
    let mut children = Vec::new();
    for line in code.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if let Some(at) = words.iter().position(|word| *word == "mod") {
            if let Some(name) = words.get(at + 1).and_then(|word| word.strip_suffix(';')) {
                children.push(name.to_owned());
            }
        }
    }
    let mut qualified = String::with_capacity(code.len());
    let bytes = code.as_bytes();
    // The brace depths at which inline modules (`mod tests { ... }`) opened: within one,
    // `super::` names the file's own module.
    let (mut depth, mut inline) = (0usize, Vec::new());
    let mut at = 0;
    while at < code.len() {
        let starts_word = at == 0
            || !(bytes[at - 1].is_ascii_alphanumeric()
                || bytes[at - 1] == b'_'
                || bytes[at - 1] == b':');
        let rest = &code[at..];
        if starts_word && rest.starts_with("mod ") {
            let header = rest[4..].trim_start();
            let name_len = header
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(header.len());
            if header[name_len..].trim_start().starts_with('{') {
                inline.push(depth + 1);
            }
        }
        match bytes[at] {
            b'{' => depth += 1,
            b'}' => {
                if inline.last() == Some(&depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
            }
            _ => {}
        }
        if starts_word && rest.starts_with("super::") && !inline.is_empty() {
            // As many `super`s as inline modules stay within the file.
            let mut supers = 0;
            while code[at + supers * 7..].starts_with("super::") {
                supers += 1;
            }
            let within = supers.min(inline.len());
            qualified.push_str("self::");
            at += within * 7;
            continue;
        }
        let child = children
            .iter()
            .find(|child| starts_word && rest.starts_with(&format!("{child}::")));
        if child.is_some() {
            qualified.push_str("self::");
        }
        let character = rest.chars().next().unwrap();
        qualified.push(character);
        at += character.len_utf8();
    }
    qualified
}

/// The paths a file's code names: each `crate::a::b`, `super::a`, `self::a`, and a child
/// module's `x::a`, with a `use` line's groups (`use crate::a::{b, c::d}`) expanded;
/// relative ones made absolute from `module` (the file's own path).
fn named_paths(module: &[String], code: &str) -> Vec<Vec<String>> {
    let code = &children_qualified(code);
    let mut paths = Vec::new();
    let bytes = code.as_bytes();
    let mut at = 0;
    while at < bytes.len() {
        let rest = &code[at..];
        let starts_word = at == 0
            || !(bytes[at - 1].is_ascii_alphanumeric()
                || bytes[at - 1] == b'_'
                || bytes[at - 1] == b':');
        let root = ["crate::", "super::", "self::"]
            .into_iter()
            .find(|root| rest.starts_with(root));
        let Some(root) = root.filter(|_| starts_word) else {
            at += 1;
            continue;
        };
        // The path, with any groups, up to where it ends.
        let mut depth = 0;
        let mut end = at;
        for (offset, character) in rest.char_indices() {
            match character {
                '{' => depth += 1,
                '}' if depth > 0 => depth -= 1,
                c if depth == 0 && !(c.is_alphanumeric() || c == '_' || c == ':') => {
                    end = at + offset;
                    break;
                }
                _ => {}
            }
            end = at + offset + character.len_utf8();
        }
        let text: String = code[at..end]
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect();
        let base: Vec<String> = match root {
            "crate::" => Vec::new(),
            "super::" => {
                // `mod.rs` is its directory's module: `super` of `a::b` (file `a/b.rs`) is
                // `a`.
                let mut base = module.to_vec();
                base.pop();
                base
            }
            _ => module.to_vec(),
        };
        for expanded in expand(&text[root.len()..]) {
            let mut path = base.clone();
            let mut parts: Vec<&str> = expanded
                .split("::")
                .filter(|part| !part.is_empty())
                .collect();
            while parts.first() == Some(&"super") {
                path.pop();
                parts.remove(0);
            }
            path.extend(parts.into_iter().map(str::to_owned));
            paths.push(path);
        }
        at = end.max(at + 1);
    }
    paths
}

/// `a::{b, c::{d, e}}` as `a::b`, `a::c::d`, `a::c::e`.
fn expand(path: &str) -> Vec<String> {
    let Some(open) = path.find('{') else {
        return vec![path.to_owned()];
    };
    let prefix = &path[..open];
    let inner = &path[open + 1..path.rfind('}').unwrap_or(path.len())];
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (at, character) in inner.char_indices() {
        match character {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..at]);
                start = at + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
        .into_iter()
        .filter(|part| !part.is_empty())
        .flat_map(expand)
        .map(|part| {
            if part == "self" {
                prefix.trim_end_matches("::").to_owned()
            } else {
                format!("{prefix}{part}")
            }
        })
        .collect()
}

/// The file a path leads to: its longest prefix that is a file of the crate.
fn file_of<'a>(
    files: &'a BTreeMap<Vec<String>, String>,
    path: &[String],
) -> Option<&'a Vec<String>> {
    (1..=path.len())
        .rev()
        .find_map(|len| files.get_key_value(&path[..len]).map(|(key, _)| key))
}

/// One `impl` block: the type it is for, whether it is the type's own (not a trait's), and
/// its body.
struct ImplBlock<'a> {
    type_name: String,
    inherent: bool,
    body: &'a str,
}

/// The `impl` blocks of `code` (comments and strings already gone).
fn impl_blocks(code: &str) -> Vec<ImplBlock<'_>> {
    let bytes = code.as_bytes();
    let mut blocks = Vec::new();
    let mut at = 0;
    while let Some(found) = code[at..].find("impl") {
        let start = at + found;
        at = start + 4;
        // An item: `impl` opens its line (`unsafe impl` too), not `-> impl Trait` in a type.
        let line_start = code[..start].rfind('\n').map_or(0, |newline| newline + 1);
        let before = code[line_start..start].trim();
        let bounded =
            matches!(before, "" | "unsafe") && matches!(bytes.get(at), Some(b'<' | b' ' | b'\n'));
        let Some(open) = code[at..].find(['{', ';']).map(|offset| at + offset) else {
            break;
        };
        if !bounded || bytes[open] == b';' {
            continue;
        }
        let header = code[at..open].split(" where ").next().unwrap_or("");
        let (inherent, target) = match header.rfind(" for ") {
            Some(split) => (false, &header[split + 5..]),
            None => (true, header),
        };
        let target = skip_generics(target.trim_start());
        let type_name: String = target
            .trim_start_matches(['&', ' '])
            .split('<')
            .next()
            .unwrap_or("")
            .rsplit("::")
            .next()
            .unwrap_or("")
            .trim()
            .to_owned();
        let mut depth = 0;
        let mut close = open;
        for (offset, byte) in bytes[open..].iter().enumerate() {
            match byte {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        close = open + offset;
                        break;
                    }
                }
                _ => {}
            }
        }
        if !type_name.is_empty() {
            blocks.push(ImplBlock {
                type_name,
                inherent,
                body: &code[open..=close],
            });
        }
        at = open + 1;
    }
    blocks
}

/// `<T: A<B>> Rest` as `Rest`: an `impl`'s own generics skipped.
fn skip_generics(text: &str) -> &str {
    let Some(rest) = text.strip_prefix('<') else {
        return text;
    };
    let mut depth = 1;
    for (offset, character) in rest.char_indices() {
        match character {
            '<' => depth += 1,
            '>' => {
                depth -= 1;
                if depth == 0 {
                    return rest[offset + 1..].trim_start();
                }
            }
            _ => {}
        }
    }
    ""
}

/// The names after each `marker` in `body` (`fn ` gives the functions it defines, `self.`
/// the methods it calls on `self`, each followed by `(`).
fn names_after<'a>(body: &'a str, marker: &str) -> Vec<&'a str> {
    let mut names = Vec::new();
    for (at, _) in body.match_indices(marker) {
        let bytes = body.as_bytes();
        if at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_') {
            continue;
        }
        let rest = &body[at + marker.len()..];
        let len = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        if len > 0 && matches!(rest[len..].chars().next(), Some('(' | '<')) {
            names.push(&rest[..len]);
        }
    }
    names
}

/// Whether `code` defines the type `name` (a struct, an enum, a union or an alias).
fn defines(code: &str, name: &str) -> bool {
    ["struct ", "enum ", "union ", "type "]
        .iter()
        .any(|kind| names_after_word(code, kind).contains(&name))
}

/// The names after each `marker` in `code` at a word's start, whatever follows them.
fn names_after_word<'a>(code: &'a str, marker: &str) -> Vec<&'a str> {
    let bytes = code.as_bytes();
    code.match_indices(marker)
        .filter(|(at, _)| {
            *at == 0 || !(bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_')
        })
        .map(|(at, _)| {
            let rest = &code[at + marker.len()..];
            let len = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            &rest[..len]
        })
        .collect()
}

/// The file that defines the type `name` as `module` names it: `module` itself, or the file
/// a path ending in `name` leads to (through re-exports, a few of them).
fn type_home(
    files: &BTreeMap<Vec<String>, String>,
    codes: &BTreeMap<&Vec<String>, String>,
    module: &[String],
    name: &str,
) -> Option<Vec<String>> {
    let mut at = module.to_vec();
    for _ in 0..4 {
        let code = codes.get(&at)?;
        if defines(code, name) {
            return Some(at);
        }
        let path = named_paths(&at, code)
            .into_iter()
            .find(|path| path.last().is_some_and(|last| last == name))?;
        let next = file_of(files, &path)?.clone();
        if next == at {
            return None;
        }
        at = next;
    }
    None
}

/// A type's method: the file that defines the type, its name, and the method's name.
type Method = (Vec<String>, String, String);

/// The files' dependencies: the other files each names, and the files whose inherent methods
/// each calls on `self` (of the same type: two types of one name in two files are two).
fn dependencies(
    files: &BTreeMap<Vec<String>, String>,
) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let codes: BTreeMap<&Vec<String>, String> = files
        .iter()
        .map(|(module, source)| (module, code_only(source)))
        .collect();
    // Each type's method -> the files whose `impl type` defines it.
    let mut defined: BTreeMap<Method, BTreeSet<Vec<String>>> = BTreeMap::new();
    for (module, code) in &codes {
        for block in impl_blocks(code).into_iter().filter(|block| block.inherent) {
            let Some(home) = type_home(files, &codes, module, &block.type_name) else {
                continue;
            };
            for method in names_after(block.body, "fn ") {
                defined
                    .entry((home.clone(), block.type_name.clone(), method.to_owned()))
                    .or_default()
                    .insert((*module).clone());
            }
        }
    }
    let mut graph = BTreeMap::new();
    for (module, code) in &codes {
        let mut named = BTreeSet::new();
        for path in named_paths(module, code) {
            if let Some(file) = file_of(files, &path) {
                // Every edge counts, a parent's to its children too (a `pub use` of one).
                if file != *module {
                    named.insert(file.clone());
                }
            }
        }
        for block in impl_blocks(code) {
            let Some(home) = type_home(files, &codes, module, &block.type_name) else {
                continue;
            };
            let calls = names_after(block.body, "self.").into_iter();
            for method in calls.chain(names_after(block.body, "Self::")) {
                let key = (home.clone(), block.type_name.clone(), method.to_owned());
                for file in defined.get(&key).into_iter().flatten() {
                    if file != *module {
                        named.insert(file.clone());
                    }
                }
            }
        }
        graph.insert((*module).clone(), named);
    }
    graph
}

/// The crate's files and, for each, the other files it depends on.
fn graph() -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    dependencies(&sources(&root))
}

/// Every edge whose target reaches back to its source, each with the way back.
fn loops(graph: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Vec<String> {
    let way_back = |from: &Vec<String>, to: &Vec<String>| -> Option<Vec<Vec<String>>> {
        let mut came_from: BTreeMap<&Vec<String>, &Vec<String>> = BTreeMap::new();
        let mut queue = std::collections::VecDeque::from([to]);
        while let Some(node) = queue.pop_front() {
            if node == from {
                let mut path = vec![from.clone()];
                let mut at = from;
                while at != to {
                    at = came_from[at];
                    path.push(at.clone());
                }
                path.reverse();
                return Some(path);
            }
            for next in &graph[node] {
                if next != to && !came_from.contains_key(next) {
                    came_from.insert(next, node);
                    queue.push_back(next);
                }
            }
        }
        None
    };
    let mut loops = Vec::new();
    for (from, named) in graph {
        for to in named {
            if let Some(path) = way_back(from, to) {
                let names: Vec<String> = path.iter().map(|m| name(m)).collect();
                loops.push(format!("{} -> {}", name(from), names.join(" -> ")));
            }
        }
    }
    loops
}

fn name(module: &[String]) -> String {
    if module.is_empty() {
        "lib".to_owned()
    } else {
        module.join("/")
    }
}

#[test]
fn no_file_depends_on_itself_through_others() {
    let graph = graph();
    let edges: usize = graph.values().map(BTreeSet::len).sum();
    let loops = loops(&graph);
    assert!(
        loops.is_empty(),
        "files that depend on themselves ({edges} edges):\n{}",
        loops.join("\n")
    );
}

/// The loop no `use` line shows: a method added to `core/windows/window_limiter.rs` that calls
/// `self.pair_counts()`, which `pair.rs` (which uses `window_limiter.rs`) defines for the same type.
#[test]
fn a_method_call_into_a_file_that_uses_this_one_is_a_loop() {
    let file = |path: &str, text: &str| {
        let module: Vec<String> = path.split('/').map(str::to_owned).collect();
        (module, text.to_owned())
    };
    let limiter = "pub struct WindowLimiter;\n\
                   impl WindowLimiter {\n    pub fn counts(&self) -> u64 { self.pair_counts() }\n}\n";
    let pair = "use super::window_limiter::WindowLimiter;\n\
                impl WindowLimiter {\n    pub(super) fn pair_counts(&self) -> u64 { 0 }\n}\n";
    let without_call = "pub struct WindowLimiter;\nimpl WindowLimiter {\n    pub fn one() {}\n}\n";
    let files = BTreeMap::from([
        file("core/windows/window_limiter", limiter),
        file("core/windows/pair", pair),
    ]);
    let found = loops(&dependencies(&files));
    assert!(
        found.contains(
            &"core/windows/window_limiter -> core/windows/pair -> core/windows/window_limiter"
                .to_owned()
        ),
        "{found:?}"
    );
    let files = BTreeMap::from([
        file("core/windows/window_limiter", without_call),
        file("core/windows/pair", pair),
    ]);
    assert!(loops(&dependencies(&files)).is_empty());
    // A trait's method on `self` or a method of another type is not this type's: no edge.
    let trait_call = "use super::window_limiter::WindowLimiter;\n\
                      impl Clone for WindowLimiter {\n    fn clone(&self) -> Self { Self::one() }\n}\n";
    let files = BTreeMap::from([
        file("core/windows/window_limiter", without_call),
        file("core/windows/pair", trait_call),
    ]);
    let graph = dependencies(&files);
    assert!(
        graph[&vec!["core".to_owned(), "windows".to_owned(), "pair".to_owned()]].contains(&vec![
            "core".to_owned(),
            "windows".to_owned(),
            "window_limiter".to_owned()
        ])
    );
    assert!(loops(&graph).is_empty());
}

#[test]
fn the_modules_point_one_way() {
    let forbidden: &[(&str, &[&str])] = &[
        ("core", &["redis", "commands", "options", "error"]),
        ("redis", &["commands", "options"]),
        ("options", &["redis", "commands"]),
        ("error", &["redis", "commands"]),
    ];
    let mut wrong = Vec::new();
    for (module, named) in graph() {
        let Some(top) = module.first() else { continue };
        for (from, not_to) in forbidden {
            if top != from {
                continue;
            }
            for file in &named {
                if file
                    .first()
                    .is_some_and(|target| not_to.contains(&target.as_str()))
                {
                    wrong.push(format!("{} uses {}", name(&module), name(file)));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_module_api_is_called_from_one_file_and_unsafe_lives_in_the_ffi_layer() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    for (module, source) in sources(&root) {
        let code = code_only(&source);
        let path = name(&module);
        // `RedisModule_OnLoad` is what the server calls, not a call into its API.
        if path != "redis/api" {
            let calls = code.replace("RedisModule_OnLoad", "");
            assert!(
                !calls.contains("RedisModule_"),
                "{path} calls the module API itself"
            );
        }
        if module.first().map(String::as_str) != Some("redis") {
            let unsafe_code = code.contains("unsafe {")
                || code.contains("unsafe fn")
                || code.contains("unsafe impl");
            assert!(!unsafe_code, "unsafe code in {path}, outside the FFI layer");
        }
    }
}

#[test]
fn the_reader_sees_path_qualified_uses_and_groups() {
    let module = vec!["commands".to_owned(), "top".to_owned()];
    let code =
        "use crate::a::{b, c::{d, e}};\nfn f() { crate::redis::startup::debug(); super::x::y(); }";
    let mut paths: Vec<String> = named_paths(&module, code)
        .iter()
        .map(|p| p.join("::"))
        .collect();
    paths.sort();
    assert_eq!(
        paths,
        [
            "a::b",
            "a::c::d",
            "a::c::e",
            "commands::x::y",
            "redis::startup::debug"
        ]
    );
}

/// The files of `src/` whose code names `AT_MOST` (or `AtMost`), its strings included:
/// comments and test modules left out.
fn files_naming_at_most() -> BTreeSet<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut named = BTreeSet::new();
    for (module, source) in sources(&root) {
        if module.iter().any(|part| part.contains("test")) {
            continue;
        }
        let before_tests = source.split("#[cfg(test)]\nmod ").next().unwrap_or("");
        let code = before_tests.lines().map(|line| match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        });
        if code
            .into_iter()
            .any(|line| line.contains("AT_MOST") || line.contains("AtMost"))
        {
            named.insert(format!("{}.rs", module.join("/")));
        }
    }
    named
}

#[test]
fn the_files_an_option_touches_are_the_ones_docs_internals_walks_through() {
    let docs = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/internals.md"))
        .unwrap();
    let walk = docs
        .split("Walking `AT_MOST` through, the code of five files of `src/` names it")
        .nth(1)
        .expect("docs/internals.md walks AT_MOST through")
        .split("\n\n")
        .next()
        .unwrap();
    let listed: BTreeSet<String> = walk
        .lines()
        .filter_map(|line| line.trim_start().strip_prefix(|c: char| c.is_ascii_digit()))
        .filter_map(|line| line.strip_prefix(". `"))
        .filter_map(|line| line.split('`').next())
        .map(str::to_owned)
        .collect();
    assert_eq!(
        listed.len(),
        5,
        "docs/internals.md says five files: {listed:?}"
    );
    assert_eq!(files_naming_at_most(), listed);
}
