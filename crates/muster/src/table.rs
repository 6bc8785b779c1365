//! Aligned text tables for human output: upper-case headers, columns padded to their widest
//! cell, two spaces between columns, no trailing spaces (so output diffs cleanly).

/// A table being built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    headers: Vec<String>,
    rows: Vec<Vec<String>>,
}

/// Space between columns: one space makes adjacent columns of words run together.
const GAP: &str = "  ";

impl Table {
    /// A table with these column headers.
    pub fn new<I: IntoIterator<Item = S>, S: Into<String>>(headers: I) -> Table {
        Table {
            headers: headers.into_iter().map(Into::into).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row; missing cells are blank, extra cells are dropped.
    pub fn row<I: IntoIterator<Item = S>, S: Into<String>>(&mut self, cells: I) {
        let mut cells: Vec<String> = cells.into_iter().map(Into::into).collect();
        cells.resize(self.headers.len(), String::new());
        self.rows.push(cells);
    }

    /// How many rows (not counting the header).
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The table as text, one line per row, each ending in a newline.
    pub fn render(&self) -> String {
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        let mut out = String::new();
        for row in std::iter::once(&self.headers).chain(&self.rows) {
            let mut line = String::new();
            for (i, (cell, width)) in row.iter().zip(&widths).enumerate() {
                if i > 0 {
                    line.push_str(GAP);
                }
                line.push_str(cell);
                line.extend(std::iter::repeat_n(' ', width - cell.chars().count()));
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}
