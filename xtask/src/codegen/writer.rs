//! A small indenting writer for generated Rust code.
//!
//! The generator writes whole lines; `open` and `close` move the indentation so blocks come out
//! nested without counting spaces by hand. rustfmt runs over the result afterwards, so the
//! writer only has to be readable, not final.

/// Generated text, one line at a time, indented by the depth of the open blocks.
#[derive(Default)]
pub struct Code {
    out: String,
    depth: usize,
}

/// `w!(code, "fmt", args..)` writes one formatted line to a [`Code`].
macro_rules! w {
    ($code:expr, $($fmt:tt)*) => {
        $code.line(&format!($($fmt)*))
    };
}
pub(crate) use w;

impl Code {
    /// An empty text.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends `text` (which may hold several lines) at the current depth.
    pub fn line(&mut self, text: &str) {
        for l in text.lines() {
            if !l.is_empty() {
                for _ in 0..self.depth {
                    self.out.push_str("    ");
                }
            }
            self.out.push_str(l);
            self.out.push('\n');
        }
        if text.is_empty() {
            self.out.push('\n');
        }
    }

    /// An empty line.
    pub fn blank(&mut self) {
        self.out.push('\n');
    }

    /// Writes `head` (a line ending in `{`, `(` or `[`) and indents what follows.
    pub fn open(&mut self, head: &str) {
        self.line(head);
        self.depth += 1;
    }

    /// Ends the innermost block with `tail` (e.g. `}` or `});`).
    pub fn close(&mut self, tail: &str) {
        self.depth = self.depth.saturating_sub(1);
        self.line(tail);
    }

    /// Ends the innermost block and opens the next one on the same line (`} else {`).
    pub fn reopen(&mut self, text: &str) {
        self.depth = self.depth.saturating_sub(1);
        self.line(text);
        self.depth += 1;
    }

    /// A `///` doc comment, one comment line per line of `text`.
    pub fn doc(&mut self, text: &str) {
        self.comment("///", text);
    }

    /// A `//!` module doc comment.
    pub fn module_doc(&mut self, text: &str) {
        self.comment("//!", text);
    }

    fn comment(&mut self, marker: &str, text: &str) {
        for l in text.lines() {
            if l.is_empty() {
                self.line(marker);
            } else {
                self.line(&format!("{marker} {l}"));
            }
        }
    }

    /// The text written so far.
    pub fn finish(self) -> String {
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::Code;

    #[test]
    fn blocks_indent() {
        let mut c = Code::new();
        c.doc("A thing.\n\nMore.");
        c.open("fn f() {");
        c.open("if x {");
        w!(c, "y({});", 1);
        c.reopen("} else {");
        c.line("z();");
        c.close("}");
        c.close("}");
        assert_eq!(
            c.finish(),
            "/// A thing.\n///\n/// More.\nfn f() {\n    if x {\n        y(1);\n    } else {\n        z();\n    }\n}\n"
        );
    }
}
