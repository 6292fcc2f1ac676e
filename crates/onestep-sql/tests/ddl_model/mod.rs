//! A small structural model of the DDL we and the reference emit, for
//! comparing the two.
//!
//! Why a structure and not text: the two sides legitimately differ in form —
//! we add `IF NOT EXISTS`, quote every name (SQLAlchemy quotes only mixed-case
//! and reserved ones), and on MySQL declare the indexes inside `CREATE TABLE`
//! (MySQL 8 lacks `CREATE INDEX IF NOT EXISTS`) — while everything that ends up
//! in the database catalog must be the same. The model keeps exactly that:
//! per table, the ordered columns (name, type, nullability, default), the
//! primary key, UNIQUE / CHECK / FOREIGN KEY constraints with their names, the
//! table options, and per index its name, table, uniqueness, ordered columns
//! with direction, and predicate. Identifiers are resolved the way the
//! database does (PostgreSQL folds unquoted names to lower case; MySQL and
//! SQLite keep them), so a quoting difference that changed the object named
//! would show up, and one that does not is ignored.

use std::collections::{BTreeMap, BTreeSet};

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    /// Identifier or keyword; `quoted` when written as `"x"` or `` `x` ``.
    Word { text: String, quoted: bool },
    /// `'...'` string literal (content without quotes).
    Str(String),
    /// Any single punctuation character.
    Punct(char),
}

fn tokenize(sql: &str) -> Vec<Tok> {
    let chars: Vec<char> = sql.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '"' || c == '`' || c == '\'' {
            let mut j = i + 1;
            let mut text = String::new();
            loop {
                assert!(j < chars.len(), "unterminated quote in {sql}");
                if chars[j] == c {
                    if j + 1 < chars.len() && chars[j + 1] == c {
                        text.push(c);
                        j += 2;
                        continue;
                    }
                    break;
                }
                text.push(chars[j]);
                j += 1;
            }
            out.push(if c == '\'' {
                Tok::Str(text)
            } else {
                Tok::Word { text, quoted: true }
            });
            i = j + 1;
        } else if c.is_ascii_alphanumeric() || c == '_' {
            let mut j = i;
            while j < chars.len() && (chars[j].is_ascii_alphanumeric() || chars[j] == '_') {
                j += 1;
            }
            out.push(Tok::Word {
                text: chars[i..j].iter().collect(),
                quoted: false,
            });
            i = j;
        } else {
            out.push(Tok::Punct(c));
            i += 1;
        }
    }
    out
}

/// Which database's identifier rules apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rules {
    /// Unquoted identifiers fold to lower case.
    Postgres,
    /// Identifiers are kept as written (MySQL, SQLite).
    AsWritten,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Column {
    pub name: String,
    pub ty: String,
    pub not_null: bool,
    pub default: Option<String>,
}

/// (constraint name, columns, referenced table, referenced columns, actions)
pub type ForeignKey = (Option<String>, Vec<String>, String, Vec<String>, String);

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Table {
    pub columns: Vec<Column>,
    pub primary_key: Vec<String>,
    /// (constraint name, columns)
    pub uniques: BTreeSet<(Option<String>, Vec<String>)>,
    /// (constraint name, normalized expression)
    pub checks: BTreeSet<(Option<String>, String)>,
    pub foreign_keys: BTreeSet<ForeignKey>,
    /// Normalized text after the closing parenthesis (`ENGINE = InnoDB …`).
    pub options: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Index {
    pub table: String,
    pub unique: bool,
    /// (column, descending)
    pub columns: Vec<(String, bool)>,
    pub predicate: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Schema {
    pub tables: BTreeMap<String, Table>,
    pub indexes: BTreeMap<String, Index>,
}

struct Parser<'a> {
    toks: &'a [Tok],
    pos: usize,
    rules: Rules,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<&'a Tok> {
        self.toks.get(self.pos)
    }

    fn next(&mut self) -> &'a Tok {
        let tok = self
            .toks
            .get(self.pos)
            .expect("unexpected end of statement");
        self.pos += 1;
        tok
    }

    fn at_kw(&self, kw: &str) -> bool {
        matches!(self.peek(), Some(Tok::Word { text, quoted: false }) if text.eq_ignore_ascii_case(kw))
    }

    fn eat_kw(&mut self, kw: &str) -> bool {
        if self.at_kw(kw) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn expect_kw(&mut self, kw: &str) {
        assert!(self.eat_kw(kw), "expected {kw} at {:?}", self.peek());
    }

    fn expect_punct(&mut self, p: char) {
        assert_eq!(self.next(), &Tok::Punct(p), "expected {p:?}");
    }

    fn ident(&mut self) -> String {
        match self.next() {
            Tok::Word { text, quoted } => resolve(text, *quoted, self.rules),
            other => panic!("expected identifier, got {other:?}"),
        }
    }

    /// Tokens up to the matching `)` of an already consumed `(`.
    fn group(&mut self) -> &'a [Tok] {
        let start = self.pos;
        let mut depth = 1;
        loop {
            match self.next() {
                Tok::Punct('(') => depth += 1,
                Tok::Punct(')') => {
                    depth -= 1;
                    if depth == 0 {
                        return &self.toks[start..self.pos - 1];
                    }
                }
                _ => {}
            }
        }
    }

    fn rest(&mut self) -> &'a [Tok] {
        let out = &self.toks[self.pos..];
        self.pos = self.toks.len();
        out
    }
}

fn resolve(text: &str, quoted: bool, rules: Rules) -> String {
    match (rules, quoted) {
        (Rules::Postgres, false) => text.to_ascii_lowercase(),
        _ => text.to_owned(),
    }
}

/// Normalized text of a token run: keywords upper-cased, identifiers resolved,
/// one space between tokens.
fn norm(toks: &[Tok], rules: Rules) -> String {
    toks.iter()
        .map(|tok| match tok {
            Tok::Word {
                text,
                quoted: false,
            } if is_keyword(text) => text.to_ascii_uppercase(),
            Tok::Word { text, quoted } => resolve(text, *quoted, rules),
            Tok::Str(s) => format!("'{}'", s.replace('\'', "''")),
            Tok::Punct(c) => c.to_string(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn is_keyword(word: &str) -> bool {
    const KEYWORDS: &[&str] = &[
        "AND",
        "OR",
        "NOT",
        "NULL",
        "IS",
        "IN",
        "ON",
        "DELETE",
        "UPDATE",
        "CASCADE",
        "ENGINE",
        "CHARSET",
        "INNODB",
        "UTF8MB4",
        "WITH",
        "TIME",
        "ZONE",
        "TIMESTAMP",
        "UUID",
        "VARCHAR",
        "CHAR",
        "JSON",
        "JSONB",
        "INTEGER",
        "BIGINT",
        "DATETIME",
        "JSON_OBJECT",
        "SET",
        "RESTRICT",
    ];
    KEYWORDS.iter().any(|kw| kw.eq_ignore_ascii_case(word))
}

/// Split at top-level commas.
fn split_commas(toks: &[Tok]) -> Vec<&[Tok]> {
    let mut out = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    for (i, tok) in toks.iter().enumerate() {
        match tok {
            Tok::Punct('(') => depth += 1,
            Tok::Punct(')') => depth -= 1,
            Tok::Punct(',') if depth == 0 => {
                out.push(&toks[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&toks[start..]);
    out
}

fn column_list(toks: &[Tok], rules: Rules) -> Vec<String> {
    index_columns(toks, rules)
        .into_iter()
        .map(|(name, desc)| {
            assert!(!desc, "DESC in a constraint column list");
            name
        })
        .collect()
}

fn index_columns(toks: &[Tok], rules: Rules) -> Vec<(String, bool)> {
    split_commas(toks)
        .into_iter()
        .map(|part| {
            let mut p = Parser {
                toks: part,
                pos: 0,
                rules,
            };
            let name = p.ident();
            let desc = p.eat_kw("DESC");
            if !desc {
                p.eat_kw("ASC");
            }
            assert!(
                p.peek().is_none(),
                "unexpected tokens in column list: {part:?}"
            );
            (name, desc)
        })
        .collect()
}

impl Schema {
    /// Build the model from a list of statements.
    pub fn from_statements<S: AsRef<str>>(statements: &[S], rules: Rules) -> Schema {
        let mut schema = Schema::default();
        for statement in statements {
            schema.apply(statement.as_ref(), rules);
        }
        schema
    }

    fn apply(&mut self, sql: &str, rules: Rules) {
        let toks = tokenize(sql);
        let mut p = Parser {
            toks: &toks,
            pos: 0,
            rules,
        };
        p.expect_kw("CREATE");
        if p.eat_kw("TABLE") {
            self.create_table(&mut p);
        } else {
            let unique = p.eat_kw("UNIQUE");
            p.expect_kw("INDEX");
            if p.eat_kw("IF") {
                p.expect_kw("NOT");
                p.expect_kw("EXISTS");
            }
            let name = p.ident();
            p.expect_kw("ON");
            let table = p.ident();
            p.expect_punct('(');
            let columns = index_columns(p.group(), rules);
            let predicate = p.eat_kw("WHERE").then(|| norm(p.rest(), rules));
            assert!(p.peek().is_none(), "trailing tokens in {sql}");
            self.add_index(
                name,
                Index {
                    table,
                    unique,
                    columns,
                    predicate,
                },
            );
        }
    }

    fn add_index(&mut self, name: String, index: Index) {
        let previous = self.indexes.insert(name.clone(), index);
        assert!(previous.is_none(), "index {name} declared twice");
    }

    fn create_table(&mut self, p: &mut Parser<'_>) {
        let rules = p.rules;
        if p.eat_kw("IF") {
            p.expect_kw("NOT");
            p.expect_kw("EXISTS");
        }
        let name = p.ident();
        p.expect_punct('(');
        let body = p.group();
        let mut table = Table {
            options: norm(p.rest(), rules),
            ..Table::default()
        };
        for item in split_commas(body) {
            let mut q = Parser {
                toks: item,
                pos: 0,
                rules,
            };
            let constraint_name = if q.eat_kw("CONSTRAINT") {
                Some(q.ident())
            } else {
                None
            };
            if q.eat_kw("PRIMARY") {
                q.expect_kw("KEY");
                q.expect_punct('(');
                table.primary_key = column_list(q.group(), rules);
            } else if q.at_kw("UNIQUE") && matches!(item.get(q.pos + 1), Some(Tok::Punct('('))) {
                q.expect_kw("UNIQUE");
                q.expect_punct('(');
                table
                    .uniques
                    .insert((constraint_name, column_list(q.group(), rules)));
            } else if q.eat_kw("CHECK") {
                q.expect_punct('(');
                let expr = norm(q.group(), rules);
                table.checks.insert((constraint_name, expr));
            } else if q.eat_kw("FOREIGN") {
                q.expect_kw("KEY");
                q.expect_punct('(');
                let cols = column_list(q.group(), rules);
                q.expect_kw("REFERENCES");
                let target = q.ident();
                q.expect_punct('(');
                let target_cols = column_list(q.group(), rules);
                let actions = norm(q.rest(), rules);
                table
                    .foreign_keys
                    .insert((constraint_name, cols, target, target_cols, actions));
            } else if constraint_name.is_none()
                && (q.at_kw("INDEX") || q.at_kw("KEY") || q.at_kw("UNIQUE"))
            {
                let unique = q.eat_kw("UNIQUE");
                if !q.eat_kw("INDEX") {
                    q.expect_kw("KEY");
                }
                let index_name = q.ident();
                q.expect_punct('(');
                let columns = index_columns(q.group(), rules);
                assert!(q.peek().is_none(), "trailing tokens in inline index");
                self.add_index(
                    index_name,
                    Index {
                        table: name.clone(),
                        unique,
                        columns,
                        predicate: None,
                    },
                );
                continue;
            } else {
                assert!(constraint_name.is_none(), "unknown constraint {item:?}");
                table.columns.push(column(&mut q));
                continue;
            }
            assert!(q.peek().is_none(), "trailing tokens in {item:?}");
        }
        let previous = self.tables.insert(name.clone(), table);
        assert!(previous.is_none(), "table {name} declared twice");
    }
}

fn column(q: &mut Parser<'_>) -> Column {
    let rules = q.rules;
    let name = q.ident();
    let start = q.pos;
    while q.peek().is_some() && !q.at_kw("NOT") && !q.at_kw("NULL") && !q.at_kw("DEFAULT") {
        if q.next() == &Tok::Punct('(') {
            q.group();
        }
    }
    let ty = norm(&q.toks[start..q.pos], rules);
    let mut not_null = false;
    let mut default = None;
    while q.peek().is_some() {
        if q.eat_kw("NOT") {
            q.expect_kw("NULL");
            not_null = true;
        } else if q.eat_kw("NULL") {
        } else if q.eat_kw("DEFAULT") {
            let start = q.pos;
            if q.next() == &Tok::Punct('(') {
                q.group();
            }
            default = Some(norm(&q.toks[start..q.pos], rules));
        } else {
            panic!("unexpected column clause {:?}", q.peek());
        }
    }
    Column {
        name,
        ty,
        not_null,
        default,
    }
}
