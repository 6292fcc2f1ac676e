//! Problems found in a configuration: what, where (YAML path, line, column), expected what.

use std::fmt;

use super::yaml::Positions;

/// One problem in a configuration file.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Problem {
    /// The YAML path, e.g. `tasks[0].retry.max_attempts`.
    pub path: String,
    /// What is wrong and what was expected.
    pub message: String,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// 1-based column, when known.
    pub column: Option<usize>,
}

/// Every problem found in one file.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Problems {
    /// The file checked.
    pub file: String,
    /// The problems, in document order.
    pub items: Vec<Problem>,
}

impl Problems {
    /// No problems yet, for `file`.
    pub fn new(file: impl Into<String>) -> Self {
        Self {
            file: file.into(),
            items: Vec::new(),
        }
    }

    /// Whether nothing was found.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Records a problem at `path`, looking up its position.
    pub fn add(
        &mut self,
        positions: &Positions,
        path: impl Into<String>,
        message: impl Into<String>,
    ) {
        let path = path.into();
        let pos = positions.find(&path);
        self.items.push(Problem {
            message: message.into(),
            line: pos.map(|p| p.0),
            column: pos.map(|p| p.1),
            path,
        });
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.line, self.column) {
            (Some(l), Some(c)) => write!(f, "{l}:{c}: {}: {}", self.path, self.message),
            _ => write!(f, "{}: {}", self.path, self.message),
        }
    }
}

impl fmt::Display for Problems {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.items.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{}:{p}", self.file)?;
        }
        Ok(())
    }
}

impl std::error::Error for Problems {}
