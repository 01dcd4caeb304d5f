//! Repeated blocks as loops: a run of ops that repeats, layer after layer (a MiniLM encoder's
//! transformer layers, the blocks of a ResNet stage), becomes one function whose body is one
//! layer's ops, run `for layer in 0..R` over per-layer tables, with one layer's operands in a
//! struct of their own (`Layer{B}`), a `Vec` of them in the `Model` built by one loop too.
//!
//! Why: flat code grows with the model's depth (rustc's and LLVM's time with it, and the reader's);
//! a loop over tables holds one layer's text whatever the depth.
//!
//! How, and why the loop is the flat code: every op is first emitted as flat text
//! (`Emitter::op`). That text is cut into tokens ([`lex`]); what may differ between layers is a
//! hole — a number or string literal, a list of literals (`&[…]`, its length may differ; `[…]`,
//! one length), a reference to a field. The rest (identifiers, punctuation, the literals' kinds
//! and suffixes, the field's type and the skeleton of its initializer) is the op's key; a run of
//! ops is a block when its keys repeat R ≥ 2 times in a row ([`detect`]). The loop's body is
//! layer 0's tokens with every hole that differs between layers replaced by `t{n}[layer]`, where
//! `t{n}` lists that hole's text of every layer, and every field that differs by `l.{name}`, the
//! layer's own struct (whose fields are built from their initializers the same way). So layer r
//! of the loop evaluates, token for token, the flat text of layer r: the same kernels, on the
//! same slots, with the same operands, in the same order — the same bits. What the tables cannot
//! express is refused, not approximated: a block stands only when every field that differs is
//! one layer's own ([`Arrangement::new`]'s check); a field the same in every layer stays where the
//! flat code has it.
//!
//! | condition | why |
//! |---|---|
//! | the ops' keys are equal layer for layer | the body is one text with holes |
//! | a literal's kind and suffix are in the key | a table column has one type (an integer column is inferred from its use, as the literal was) |
//! | `[…]` by value: the length is in the key | an array's length is its type |
//! | a field that differs: a different field in every layer, read only by its own layer in the block, the same for every reader of one position | `l.{name}` names one field of the layer's own struct |
//! | a field the same in every layer: not another position's per-layer field | it stays a field of a part (or `Shared{B}`), read as in the flat code |
//! | columns of equal values are one only for strings and suffixed literals, or between the same texts | an unsuffixed literal's type is its use's: one column for a slot index and a zero point would not type |
//! | not a hole: digits of identifiers (`x0`, `u8`), a tuple field or range end after `.`, a comment | they are code, not data (a comment is rewritten as layer 0's) |
//! | at least [`MIN_SAVED`] ops' text saved, and fewer lines than the flat code ([`shorter`]) | a loop over two tiny layers (yolov8n's bottlenecks) is no clearer than the flat code |
//!
//! A block is one function whatever R (its body one layer's ops), the ops between blocks stay in
//! parts of at most `OPS_PER_PART`: the size of what LLVM optimizes at once stays bounded.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;

/// A block is a loop when it saves at least this many ops' text ((R − 1)·L).
pub const MIN_SAVED: usize = 4;

/// One token of generated text; all but `Text` and `Comment` are holes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Tok<'t> {
    /// Code every layer shares (identifiers, punctuation, spaces).
    Text(&'t str),
    /// A `//` comment, to the end of its line: no part of the key.
    Comment(&'t str),
    /// A number or a string literal.
    Lit(&'t str),
    /// `&[…]` of literals: its length may differ between layers.
    Slice(&'t str),
    /// `[…]` of literals by value: one length.
    Array(&'t str),
    /// `self.p{op}.{name}`, held as `p{op}.{name}` (the field's name in the first pass).
    Field(&'t str),
}

fn ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// The end of the number starting at `i`: digits, letters (hex, suffix, exponent), one `.` before
/// a digit, an exponent's sign.
fn number_end(b: &[u8], i: usize) -> usize {
    let mut j = i;
    while j < b.len() && ident(b[j]) {
        j += 1;
    }
    let hex = b[i..j].starts_with(b"0x");
    if !hex && j + 1 < b.len() && b[j] == b'.' && b[j + 1].is_ascii_digit() {
        j += 1;
        while j < b.len() && ident(b[j]) {
            j += 1;
        }
    }
    if !hex && matches!(b[j - 1], b'e' | b'E') && j + 1 < b.len() && matches!(b[j], b'-' | b'+') && b[j + 1].is_ascii_digit() {
        j += 1;
        while j < b.len() && ident(b[j]) {
            j += 1;
        }
    }
    j
}

/// The end of the string literal opening at `i` (after its closing quote).
fn string_end(b: &[u8], i: usize) -> usize {
    let mut j = i + 1;
    while j < b.len() && b[j] != b'"' {
        j += if b[j] == b'\\' { 2 } else { 1 };
    }
    (j + 1).min(b.len())
}

/// A literal's kind: `str`, its suffix (`i64`, `f32`, …), or `i`/`f` (unsuffixed integer, float).
pub(super) fn kind(lit: &str) -> String {
    if lit.starts_with('"') {
        return "str".into();
    }
    let l = lit.trim_start_matches('-');
    let hex = l.starts_with("0x");
    let cut = if hex { l.find(['i', 'u']) } else { l.find(['i', 'u', 'f']) };
    let (digits, suffix) = l.split_at(cut.unwrap_or(l.len()));
    if !suffix.is_empty() {
        return suffix.into();
    }
    if !hex && digits.contains(['.', 'e', 'E']) { "f".into() } else { "i".into() }
}

/// The items of a list of literals `[…]` opening at `open`: its end and its items' one kind
/// (empty for `[]`), or `None` when it is not a list of literals of one kind.
fn list_end(s: &str, open: usize) -> Option<(usize, String)> {
    let close = open + s[open..].find(']')?;
    let inner = &s[open + 1..close];
    if inner.trim().is_empty() {
        return Some((close + 1, String::new()));
    }
    let mut kinds = Vec::new();
    for item in inner.split(',') {
        let item = item.trim();
        let digits = item.strip_prefix('-').unwrap_or(item);
        let b = digits.as_bytes();
        if b.is_empty() || !b[0].is_ascii_digit() || number_end(b, 0) != b.len() {
            return None;
        }
        kinds.push(kind(item));
    }
    kinds.dedup();
    (kinds.len() == 1).then(|| (close + 1, kinds.remove(0)))
}

/// The tokens of generated text; their texts concatenate back to `s`.
pub(super) fn lex(s: &str) -> Vec<Tok<'_>> {
    let b = s.as_bytes();
    let (mut out, mut text, mut i) = (Vec::new(), 0, 0);
    while i < b.len() {
        let prev = if i > 0 { b[i - 1] } else { b' ' };
        let (tok, end) = if b[i..].starts_with(b"//") {
            let end = s[i..].find('\n').map_or(b.len(), |k| i + k);
            (Some(Tok::Comment(&s[i..end])), end)
        } else if b[i] == b'"' {
            let end = string_end(b, i);
            (Some(Tok::Lit(&s[i..end])), end)
        } else if b[i] == b'&' && b.get(i + 1) == Some(&b'[') {
            match list_end(s, i + 1) {
                Some((end, _)) => (Some(Tok::Slice(&s[i..end])), end),
                None => (None, i + 1),
            }
        } else if b[i] == b'[' && !(ident(prev) || matches!(prev, b']' | b')' | b'!' | b'&')) {
            // Not an index (`ws.u8[3]`, `d[0]`) nor a macro's brackets (`vec![…]`).
            match list_end(s, i) {
                Some((end, _)) => (Some(Tok::Array(&s[i..end])), end),
                None => (None, i + 1),
            }
        } else if !ident(prev) && prev != b'.' && b[i..].starts_with(b"self.p") {
            let digits = b[i + 6..].iter().take_while(|c| c.is_ascii_digit()).count();
            let at = i + 6 + digits;
            let name = if digits > 0 && b.get(at) == Some(&b'.') { b[at + 1..].iter().take_while(|&&c| ident(c)).count() } else { 0 };
            if name > 0 { (Some(Tok::Field(&s[i + 5..at + 1 + name])), at + 1 + name) } else { (None, i + 4) }
        } else if b[i].is_ascii_digit() && !ident(prev) && prev != b'.' {
            // After a `.`: a tuple field (`.1`) or a range's end, shared text.
            let end = number_end(b, i);
            (Some(Tok::Lit(&s[i..end])), end)
        } else if ident(b[i]) {
            (None, i + b[i..].iter().take_while(|&&c| ident(c)).count())
        } else {
            (None, i + 1)
        };
        if let Some(t) = tok {
            if text < i {
                out.push(Tok::Text(&s[text..i]));
            }
            out.push(t);
            text = end;
        }
        i = end;
    }
    if text < b.len() {
        out.push(Tok::Text(&s[text..]));
    }
    out
}

/// Appends the key of `toks` (holes as their kinds); field references are numbered in order of
/// first appearance, their names pushed to `fields`.
fn key_of<'t>(toks: &[Tok<'t>], key: &mut String, fields: &mut Vec<&'t str>) {
    for t in toks {
        match t {
            Tok::Text(s) => key.push_str(s),
            Tok::Comment(_) => {}
            Tok::Lit(l) => write!(key, "\u{1}{}\u{1}", kind(l)).unwrap(),
            Tok::Slice(l) => write!(key, "\u{2}{}\u{2}", list_end(&l[1..], 0).map(|(_, k)| k).unwrap_or_default()).unwrap(),
            Tok::Array(l) => write!(key, "\u{3}{}:{}\u{3}", list_end(l, 0).map(|(_, k)| k).unwrap_or_default(), items(l).len()).unwrap(),
            Tok::Field(f) => {
                let m = fields.iter().position(|g| g == f).unwrap_or_else(|| {
                    fields.push(f);
                    fields.len() - 1
                });
                write!(key, "\u{4}{m}\u{4}").unwrap();
            }
        }
    }
}

/// The items of a list's text (`[…]` or `&[…]`).
fn items(list: &str) -> Vec<&str> {
    let inner = list.trim_start_matches('&').trim_start_matches('[').trim_end_matches(']');
    if inner.trim().is_empty() { Vec::new() } else { inner.split(',').map(str::trim).collect() }
}

/// Runs of `keys` that repeat: `(start, ops per layer, layers)`, left to right; at each start the
/// run covering most ops (then the shortest layer) that `accept` takes, if it saves at least
/// `min_saved` ops.
pub(super) fn detect(keys: &[u32], min_saved: usize, accept: &mut dyn FnMut(usize, usize, usize) -> bool) -> Vec<(usize, usize, usize)> {
    let (n, mut i, mut out) = (keys.len(), 0, Vec::new());
    while i < n {
        let mut found = Vec::new();
        for l in 1..=(n - i) / 2 {
            let body = &keys[i..i + l];
            if keys[i + l] != keys[i] || body != &keys[i + l..i + 2 * l] {
                continue;
            }
            let mut r = 2;
            while i + (r + 1) * l <= n && body == &keys[i + r * l..i + (r + 1) * l] {
                r += 1;
            }
            if (r - 1) * l >= min_saved {
                found.push((l * r, l, r));
            }
        }
        found.sort_by_key(|&(covered, l, _)| (std::cmp::Reverse(covered), l));
        match found.into_iter().find(|&(_, l, r)| accept(i, l, r)) {
            Some((covered, l, r)) => {
                out.push((i, l, r));
                i += covered;
            }
            None => i += 1,
        }
    }
    out
}

/// Where a field lives in the generated `Model`.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Home {
    /// `p{part}.{name}`: a field of a flat part's struct.
    Part(usize),
    /// `s{block}.{name}`: owned by an op of a block, the same in every layer.
    Shared(usize),
    /// `b{block}[layer].{name}`: one layer's own.
    Layer { block: usize, layer: usize, name: String },
}

/// A run of `run_with`: flat ops (at most `OPS_PER_PART`) or a block.
pub(super) enum Segment {
    Flat(std::ops::Range<usize>),
    Block(usize),
}

/// One block: ops `start..start + len * layers`.
pub(super) struct Block {
    pub start: usize,
    pub len: usize,
    pub layers: usize,
    /// The layer's fields: name (layer 0's), type, and the field of every layer.
    pub fields: Vec<(String, String, Vec<usize>)>,
}

/// The whole program's arrangement: segments, blocks, every field's home.
pub(super) struct Arrangement {
    pub segments: Vec<Segment>,
    pub blocks: Vec<Block>,
    pub home: Vec<Home>,
}

/// The short name of a first-pass field `p{op}.{name}`, and its op.
pub(super) fn split(field: &str) -> (usize, &str) {
    let (op, name) = field.split_once('.').unwrap_or(("p0", field));
    (op[1..].parse().unwrap_or(0), name)
}

impl Arrangement {
    /// Finds the blocks of `texts` (each op's flat text) over `fields` (first-pass name, type,
    /// initializer), then parts of at most `per_part` ops between them.
    pub fn new(texts: &[String], fields: &[(String, String, String)], per_part: usize) -> Arrangement {
        let id: HashMap<&str, usize> = fields.iter().enumerate().map(|(k, f)| (f.0.as_str(), k)).collect();
        // Each op's key, and the fields it reads in order of first reference.
        let mut interned: HashMap<String, u32> = HashMap::new();
        let mut keys = Vec::new();
        let mut reads: Vec<Vec<usize>> = Vec::new();
        for text in texts {
            let (mut key, mut refs) = (String::new(), Vec::new());
            key_of(&lex(text), &mut key, &mut refs);
            let refs: Vec<usize> = refs.iter().map(|f| id.get(f).copied().unwrap_or(usize::MAX)).collect();
            for &f in &refs {
                // The field's type and initializer's skeleton belong to the op's key.
                match fields.get(f) {
                    Some((_, ty, init)) => {
                        write!(key, "\u{5}{ty}\u{5}").unwrap();
                        key_of(&lex(init), &mut key, &mut Vec::new());
                    }
                    None => key.push('\u{6}'),
                }
            }
            let next = interned.len() as u32;
            keys.push(*interned.entry(key).or_insert(next));
            reads.push(refs);
        }
        let mut claimed: HashMap<usize, (usize, usize, String)> = HashMap::new();
        let mut blocks = Vec::new();
        let mut accept = |start: usize, len: usize, layers: usize| -> bool {
            match layer_fields(&reads, fields, start, len, layers, &claimed) {
                Some(found) if shorter(texts, fields, start, len, layers, &found) => {
                    let block = blocks.len();
                    for (name, _, per_layer) in &found {
                        for (layer, &f) in per_layer.iter().enumerate() {
                            claimed.insert(f, (block, layer, name.clone()));
                        }
                    }
                    blocks.push(Block { start, len, layers, fields: found });
                    true
                }
                _ => false,
            }
        };
        detect(&keys, MIN_SAVED, &mut accept);
        let mut segments = Vec::new();
        let mut i = 0;
        let flat = |from: usize, to: usize, segments: &mut Vec<Segment>| {
            let mut a = from;
            while a < to {
                segments.push(Segment::Flat(a..(a + per_part).min(to)));
                a += per_part;
            }
        };
        for (b, block) in blocks.iter().enumerate() {
            flat(i, block.start, &mut segments);
            segments.push(Segment::Block(b));
            i = block.start + block.len * block.layers;
        }
        flat(i, texts.len(), &mut segments);
        // Every field's home: its layer's, else its owner op's segment.
        let mut owner_segment = vec![Home::Part(0); texts.len()];
        let mut part = 0;
        for s in &segments {
            match s {
                Segment::Flat(r) => {
                    for op in r.clone() {
                        owner_segment[op] = Home::Part(part);
                    }
                    part += 1;
                }
                Segment::Block(b) => {
                    let bl = &blocks[*b];
                    for h in &mut owner_segment[bl.start..bl.start + bl.len * bl.layers] {
                        *h = Home::Shared(*b);
                    }
                }
            }
        }
        let home = (0..fields.len())
            .map(|f| match claimed.get(&f) {
                Some((block, layer, name)) => Home::Layer { block: *block, layer: *layer, name: name.clone() },
                None => owner_segment.get(split(&fields[f].0).0).cloned().unwrap_or(Home::Part(0)),
            })
            .collect();
        Arrangement { segments, blocks, home }
    }

    /// The expression (after `self.`) that reaches field `f` from outside its layer's loop.
    pub fn location(&self, fields: &[(String, String, String)], f: usize) -> String {
        let name = split(&fields[f].0).1;
        match &self.home[f] {
            Home::Part(k) => format!("p{k}.{name}"),
            Home::Shared(b) => format!("s{b}.{name}"),
            Home::Layer { block, layer, name } => format!("b{block}[{layer}].{name}"),
        }
    }

    /// An op's flat text with its field references at their homes.
    pub fn flat(&self, text: &str, fields: &[(String, String, String)]) -> String {
        let id: HashMap<&str, usize> = fields.iter().enumerate().map(|(k, f)| (f.0.as_str(), k)).collect();
        lex(text)
            .iter()
            .map(|t| match t {
                Tok::Field(f) => match id.get(f) {
                    Some(&k) => format!("self.{}", self.location(fields, k)),
                    None => format!("self.{f}"),
                },
                Tok::Text(s) | Tok::Comment(s) | Tok::Lit(s) | Tok::Slice(s) | Tok::Array(s) => s.to_string(),
            })
            .collect()
    }
}

/// Whether the loop's text (the body once, a line per table column, the layer's struct) has
/// fewer lines than the flat code's: otherwise the flat code is the clearer.
fn shorter(texts: &[String], fields: &[(String, String, String)], start: usize, len: usize, layers: usize, found: &[(String, String, Vec<usize>)]) -> bool {
    let lines = |t: &str| t.lines().count();
    let flat: usize = texts[start..start + len * layers].iter().map(|t| lines(t)).sum::<usize>() + 2 * layers * found.len();
    let (mut run, mut build) = (Tables::default(), Tables::default());
    let mut looped = 12 + 2 * found.len();
    for o in 0..len {
        let per_layer: Vec<Vec<Tok>> = (0..layers).map(|r| lex(&texts[start + r * len + o])).collect();
        if unify(&per_layer, &mut run, &mut |_| Ok(String::new())).is_err() {
            return false;
        }
        looped += lines(&texts[start + o]);
    }
    for (_, _, per_layer) in found {
        let inits: Vec<Vec<Tok>> = per_layer.iter().map(|&f| lex(&fields[f].2)).collect();
        if unify(&inits, &mut build, &mut no_field).is_err() {
            return false;
        }
    }
    looped + run.len() + build.len() < flat
}

/// The per-layer fields of the block `start`, `len` × `layers` (name, type, the field of every
/// layer), or `None` when a field that differs between layers is not one layer's own (the
/// module's table).
fn layer_fields(
    reads: &[Vec<usize>],
    fields: &[(String, String, String)],
    start: usize,
    len: usize,
    layers: usize,
    claimed: &HashMap<usize, (usize, usize, String)>,
) -> Option<Vec<(String, String, Vec<usize>)>> {
    let mut found: Vec<(String, String, Vec<usize>)> = Vec::new();
    // A per-layer field: (layer, its entry in `found`).
    let mut owner: HashMap<usize, (usize, usize)> = HashMap::new();
    let mut same = Vec::new();
    for o in 0..len {
        for m in 0..reads[start + o].len() {
            let per_layer: Vec<usize> = (0..layers).map(|r| reads.get(start + r * len + o).and_then(|f| f.get(m)).copied().unwrap_or(usize::MAX)).collect();
            if per_layer.contains(&usize::MAX) {
                return None;
            }
            if per_layer.iter().all(|&f| f == per_layer[0]) {
                same.push(per_layer[0]);
                continue;
            }
            let entry = match owner.get(&per_layer[0]) {
                Some(&(0, k)) => k,
                Some(_) => return None,
                None => {
                    found.push((split(&fields[per_layer[0]].0).1.to_string(), fields[per_layer[0]].1.clone(), per_layer.clone()));
                    found.len() - 1
                }
            };
            if found[entry].2 != per_layer {
                return None;
            }
            for (r, &f) in per_layer.iter().enumerate() {
                if claimed.contains_key(&f) || owner.insert(f, (r, entry)).is_some_and(|was| was != (r, entry)) {
                    return None;
                }
            }
        }
    }
    if same.iter().any(|f| owner.contains_key(f)) {
        return None;
    }
    Some(found)
}

/// Per-layer tables of one function: `let t{n} = [...];` columns indexed by `layer`.
#[derive(Default)]
pub(super) struct Tables {
    decls: Vec<String>,
    /// Columns by values (and, where their type comes from their use, the texts around them).
    shared: BTreeMap<String, usize>,
}

impl Tables {
    /// A column of `values` (one per layer) written between the texts `around`; returns the
    /// expression reading this layer's. Columns of equal values are one: always where the type is
    /// the literals' own (strings, suffixed literals), and between the same texts otherwise (the
    /// same place in the same kind of call, so the same type is inferred).
    fn column(&mut self, values: &[&str], slice: bool, around: (&str, &str)) -> String {
        let rhs = format!("[{}]", values.join(", "));
        let typed = values.iter().all(|v| !matches!(kind(v).as_str(), "i" | "f"));
        let key = if typed { rhs.clone() } else { format!("{rhs}\u{0}{}\u{0}{}", around.0, around.1) };
        if let Some(&n) = self.shared.get(&key) {
            return format!("t{n}[layer]");
        }
        let n = self.decls.len();
        let ty = if slice { format!(": [&[_]; {}]", values.len()) } else { String::new() };
        self.decls.push(format!("let t{n}{ty} = {rhs};"));
        self.shared.insert(key, n);
        format!("t{n}[layer]")
    }

    /// How many columns.
    pub fn len(&self) -> usize {
        self.decls.len()
    }

    pub fn is_empty(&self) -> bool {
        self.decls.is_empty()
    }

    /// The declarations, one a line at `indent`.
    pub fn decls(&self, indent: &str) -> String {
        self.decls.iter().map(|d| format!("{indent}{d}\n")).collect()
    }
}

/// One text for every layer: `layers` holds the same token skeleton once per layer; a hole the
/// same in every layer keeps its text, one that differs reads its column of `tables`; a field
/// is `field(its name in every layer)`.
pub(super) fn unify(layers: &[Vec<Tok>], tables: &mut Tables, field: &mut dyn FnMut(&[&str]) -> Result<String, String>) -> Result<String, String> {
    let first = &layers[0];
    if layers.iter().any(|l| l.len() != first.len()) {
        return Err("a block's layers do not share one skeleton".into());
    }
    let mut out = String::new();
    fn text<'t>(t: Option<&Tok<'t>>) -> &'t str {
        match t {
            Some(Tok::Text(s)) => s,
            _ => "",
        }
    }
    for (t, tok) in first.iter().enumerate() {
        let around = (text(t.checked_sub(1).and_then(|p| first.get(p))), text(first.get(t + 1)));
        let texts: Vec<&str> = layers
            .iter()
            .map(|l| match l[t] {
                Tok::Text(s) | Tok::Comment(s) | Tok::Lit(s) | Tok::Slice(s) | Tok::Array(s) | Tok::Field(s) => s,
            })
            .collect();
        let same = texts.iter().all(|s| *s == texts[0]);
        match tok {
            Tok::Text(s) => out.push_str(s),
            Tok::Comment(c) => write!(out, "{c}, in layer 0").unwrap(),
            Tok::Field(_) => out.push_str(&field(&texts)?),
            _ if same => out.push_str(texts[0]),
            Tok::Lit(_) | Tok::Array(_) => out.push_str(&tables.column(&texts, false, around)),
            Tok::Slice(_) => {
                let lengths: Vec<usize> = texts.iter().map(|s| items(s).len()).collect();
                if lengths.iter().all(|&n| n == lengths[0]) {
                    let arrays: Vec<&str> = texts.iter().map(|s| &s[1..]).collect();
                    write!(out, "&{}", tables.column(&arrays, false, around)).unwrap();
                } else {
                    out.push_str(&tables.column(&texts, true, around));
                }
            }
        }
    }
    Ok(out)
}

fn no_field(_: &[&str]) -> Result<String, String> {
    Err("an initializer reads a field".into())
}

/// The body of block `b`'s run function: its tables, then the loop over its layers.
pub(super) fn block_body(layout: &Arrangement, b: usize, texts: &[String], fields: &[(String, String, String)]) -> Result<String, String> {
    let bl = &layout.blocks[b];
    let id: HashMap<&str, usize> = fields.iter().enumerate().map(|(k, f)| (f.0.as_str(), k)).collect();
    let (mut tables, mut body, mut own) = (Tables::default(), String::new(), false);
    for o in 0..bl.len {
        let layers: Vec<Vec<Tok>> = (0..bl.layers).map(|r| lex(&texts[bl.start + r * bl.len + o])).collect();
        let mut field = |names: &[&str]| -> Result<String, String> {
            let ids = names.iter().map(|n| id.get(n).copied().ok_or(format!("no field {n}"))).collect::<Result<Vec<usize>, String>>()?;
            if ids.iter().all(|&f| f == ids[0]) {
                return Ok(format!("self.{}", layout.location(fields, ids[0])));
            }
            match &layout.home[ids[0]] {
                Home::Layer { block, name, .. } if *block == b => {
                    own = true;
                    Ok(format!("l.{name}"))
                }
                _ => Err(format!("field {} differs between layers but is not a layer's own", names[0])),
            }
        };
        body.push_str(&unify(&layers, &mut tables, &mut field)?);
    }
    let mut out = tables.decls("        ");
    let layer = if tables.is_empty() && !own { "_" } else { "layer" };
    writeln!(out, "        for {layer} in 0..{} {{", bl.layers).unwrap();
    if own {
        writeln!(out, "            let l = &self.b{b}[layer];").unwrap();
    }
    for line in body.lines() {
        if line.is_empty() { out.push('\n') } else { writeln!(out, "    {line}").unwrap() }
    }
    out.push_str("        }\n");
    Ok(out)
}

/// Block `b`'s `Layer{b}` struct and its `build`, one loop over the layers' tables.
pub(super) fn layer_struct(layout: &Arrangement, b: usize, fields: &[(String, String, String)]) -> Result<String, String> {
    let bl = &layout.blocks[b];
    let mut out = format!("/// One layer's operands of block {b} ({} layers).\nstruct Layer{b} {{\n", bl.layers);
    for (name, ty, _) in &bl.fields {
        writeln!(out, "    {name}: {ty},").unwrap();
    }
    out.push_str("}\n\n");
    let mut tables = Tables::default();
    let mut inits = String::new();
    for (name, _, per_layer) in &bl.fields {
        let layers: Vec<Vec<Tok>> = per_layer.iter().map(|&f| lex(&fields[f].2)).collect();
        writeln!(inits, "                {name}: {},", unify(&layers, &mut tables, &mut no_field)?).unwrap();
    }
    let layer = if tables.is_empty() { "_" } else { "layer" };
    write!(
        out,
        "impl Layer{b} {{\n    #[inline(never)]\n    fn build(blob: &Blob, k: Kernels) -> Result<Vec<Layer{b}>, Error> {{\n        let _ = (blob, k);\n{}        let mut layers = Vec::with_capacity({});\n        for {layer} in 0..{} {{\n            layers.push(Layer{b} {{\n{inits}            }});\n        }}\n        Ok(layers)\n    }}\n}}\n\n",
        tables.decls("        "),
        bl.layers,
        bl.layers
    )
    .unwrap();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(ops: &[&str]) -> Vec<u32> {
        let mut interned: HashMap<String, u32> = HashMap::new();
        ops.iter()
            .map(|t| {
                let mut key = String::new();
                key_of(&lex(t), &mut key, &mut Vec::new());
                let next = interned.len() as u32;
                *interned.entry(key).or_insert(next)
            })
            .collect()
    }

    #[test]
    fn the_lexer_gives_back_the_text_and_finds_its_holes() {
        let s = "        let mut y = slot(&mut ws.u8[3], 1 * 8 * 16 * 16); // n (x0)\n        f::<u8>(self.p12.n3_conv.1, &[1, -2, 3], [4i64, 5i64], vec![3, 3], 0x3c00, 1.5e-3, \"a\\\"b\", x0, d[0], 0..4);";
        let toks = lex(s);
        let back: String = toks
            .iter()
            .map(|t| match t {
                Tok::Text(s) | Tok::Comment(s) | Tok::Lit(s) | Tok::Slice(s) | Tok::Array(s) | Tok::Field(s) => *s,
            })
            .collect::<Vec<_>>()
            .join("");
        assert_eq!(back.replace("p12.n3_conv", "self.p12.n3_conv"), s);
        let holes: Vec<Tok> = toks.into_iter().filter(|t| !matches!(t, Tok::Text(_))).collect();
        assert_eq!(
            holes,
            vec![
                Tok::Lit("3"),
                Tok::Lit("1"),
                Tok::Lit("8"),
                Tok::Lit("16"),
                Tok::Lit("16"),
                Tok::Comment("// n (x0)"),
                Tok::Field("p12.n3_conv"),
                Tok::Slice("&[1, -2, 3]"),
                Tok::Array("[4i64, 5i64]"),
                Tok::Lit("3"),
                Tok::Lit("3"),
                Tok::Lit("0x3c00"),
                Tok::Lit("1.5e-3"),
                Tok::Lit("\"a\\\"b\""),
                Tok::Lit("0"),
                Tok::Lit("0"),
            ]
        );
        assert_eq!((kind("0x3c00"), kind("1.5e-3"), kind("-4i64"), kind("2f32"), kind("7")), ("i".into(), "f".into(), "i64".into(), "f32".into(), "i".into()));
    }

    #[test]
    fn a_repeated_run_is_found_with_its_layers_and_length() {
        let conv = "conv(&ws.u8[1], &[1, 8, 16, 16], \"a\");";
        let add = "add(&ws.u8[2], 0x3c00);";
        let other = "pool(&ws.u8[0]);";
        let mut ops = vec![other];
        for _ in 0..3 {
            ops.extend([conv, conv, add]);
        }
        ops.push(other);
        assert_eq!(detect(&keys(&ops), MIN_SAVED, &mut |_, _, _| true), vec![(1, 3, 3)]);
        // Layer for layer the literals differ (slots, shapes, names): the same key.
        let layers = ["conv(&ws.u8[4], &[1, 32, 8, 8], \"b\");", "add(&ws.u8[5], 0x3d00);"];
        let k = keys(&[conv, add, layers[0], layers[1], conv, add]);
        assert_eq!(detect(&k, MIN_SAVED, &mut |_, _, _| true), vec![(0, 2, 3)]);
        // Too little saved: two layers of two ops.
        assert_eq!(detect(&k[..4], MIN_SAVED, &mut |_, _, _| true), vec![]);
        // A refused candidate leaves the next one (or none).
        assert_eq!(detect(&k, MIN_SAVED, &mut |_, _, _| false), vec![]);
    }

    #[test]
    fn a_near_repeat_is_not_merged() {
        let a = "conv::<u8, u8>(&ws.u8[1], 3);";
        let b = "conv::<u8, i8>(&ws.u8[1], 3);"; // another kernel instance
        let c = "conv::<u8, u8>(&ws.u8[1], 3.5);"; // a float where the others have an integer
        let d = "conv::<u8, u8>(&ws.u8[1], [1, 2]);"; // an array of another length…
        let e = "conv::<u8, u8>(&ws.u8[1], [1, 2, 3]);";
        let k = keys(&[a, a, a, b, a, c, d, e]);
        assert_eq!(k.iter().collect::<std::collections::BTreeSet<_>>().len(), 5);
        assert_eq!(detect(&k, 2, &mut |_, _, _| true), vec![(0, 1, 3)]);
    }

    #[test]
    fn slices_of_different_lengths_are_one_hole() {
        let ops = ["f(&[1, 2]);", "f(&[3, 4, 5]);", "f(&[]);"];
        let k = keys(&ops[..2]);
        assert_eq!(k[0], k[1]);
        let layers: Vec<Vec<Tok>> = ops[..2].iter().map(|t| lex(t)).collect();
        let mut tables = Tables::default();
        let body = unify(&layers, &mut tables, &mut |_| Err("no field".into())).unwrap();
        assert_eq!(body, "f(t0[layer]);");
        assert_eq!(tables.decls(""), "let t0: [&[_]; 2] = [&[1, 2], &[3, 4, 5]];\n");
        // Equal lengths: one array per layer, borrowed as the flat code borrows its literal.
        let layers: Vec<Vec<Tok>> = ["f(&[1, 2], \"x\", 7, \"x\");", "f(&[3, 4], \"y\", 7, \"y\");"].iter().map(|t| lex(t)).collect();
        let mut tables = Tables::default();
        assert_eq!(unify(&layers, &mut tables, &mut |_| Err("no field".into())).unwrap(), "f(&t0[layer], t1[layer], 7, t1[layer]);");
        assert_eq!(tables.decls(""), "let t0 = [[1, 2], [3, 4]];\nlet t1 = [\"x\", \"y\"];\n");
    }

    /// Layers of two ops, six lines each: the first reads its own requantization (`n{op}_rq`)
    /// and the field `shared(layer)` names; the second its own table.
    fn program(layers: usize, shared: impl Fn(usize) -> String) -> (Vec<String>, Vec<(String, String, String)>) {
        let (mut texts, mut fields) = (Vec::new(), Vec::new());
        fields.push(("p0.c0".to_string(), "Vec<f32>".to_string(), "blob.f32s(0, 4)".to_string()));
        for r in 0..layers {
            let (a, b) = (2 * r, 2 * r + 1);
            fields.push((format!("p{a}.n{a}_rq"), "Requant".into(), format!("Requant::new({}, \"conv{r}\")?", 64 * r)));
            fields.push((format!("p{b}.n{b}_t"), "[u8; 256]".into(), format!("table({r})")));
            let lines = |op: usize, what: &str| {
                format!(
                    "        // op{op}\n        let mut y = slot(&mut ws.u8[{}], 8);\n{what}        a(&y);\n        b(&y);\n        ws.u8[{}] = y;\n",
                    r % 2,
                    r % 2
                )
            };
            texts.push(lines(a, &format!("        f(&self.p{a}.n{a}_rq, &self.{}, \"conv{r}\")?;\n", shared(r))));
            texts.push(lines(b, &format!("        g(&self.p{b}.n{b}_t, &[1, {r}])?;\n")));
        }
        (texts, fields)
    }

    #[test]
    fn a_field_every_layer_reads_stays_shared_and_each_layers_own_goes_to_its_struct() {
        let (texts, fields) = program(4, |_| "p0.c0".into());
        let a = Arrangement::new(&texts, &fields, 16);
        assert_eq!(a.blocks.len(), 1);
        let b = &a.blocks[0];
        assert_eq!((b.start, b.len, b.layers), (0, 2, 4));
        assert_eq!(b.fields.iter().map(|f| f.0.as_str()).collect::<Vec<_>>(), ["n0_rq", "n1_t"]);
        assert_eq!(a.home[0], Home::Shared(0));
        assert_eq!((a.location(&fields, 7), a.location(&fields, 8)), ("b0[3].n0_rq".to_string(), "b0[3].n1_t".to_string()));
        let body = block_body(&a, 0, &texts, &fields).unwrap();
        assert!(body.contains("f(&l.n0_rq, &self.s0.c0, t1[layer])?;") && body.contains("let t1 = [\"conv0\", \"conv1\", \"conv2\", \"conv3\"];"), "{body}");
        let build = layer_struct(&a, 0, &fields).unwrap();
        assert!(build.contains("n0_rq: Requant::new(t0[layer], t1[layer])?,"), "{build}");
    }

    #[test]
    fn a_field_that_differs_but_is_not_one_layers_own_is_refused() {
        // From layer 1 on, each layer reads the previous layer's requantization: no `l.` names it.
        let (texts, fields) = program(4, |r| if r == 0 { "p0.c0".into() } else { format!("p{}.n{}_rq", 2 * r - 2, 2 * r - 2) });
        let a = Arrangement::new(&texts, &fields, 16);
        // (Layers 1 to 3 neither: layer r's own is read by layer r + 1.)
        assert!(a.blocks.is_empty(), "{:?}", a.blocks.iter().map(|b| (b.start, b.len, b.layers)).collect::<Vec<_>>());
    }
}
