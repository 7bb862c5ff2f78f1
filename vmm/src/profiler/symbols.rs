//! Kernel symbols for the profiler, read from the guest kernel's vmlinux
//! (kept beside the cached kernel: its symbol table is not stripped).

use std::path::Path;

use object::{Object, ObjectSection, ObjectSymbol, SectionKind, SymbolKind};

use crate::error::{Error, Result};

/// A function's name and extent.
#[derive(Clone, Debug)]
struct Function {
    start: u64,
    end: u64,
    name: String,
}

/// The functions and data symbols of one ELF file.
#[derive(Clone, Debug, Default)]
pub struct Symbols {
    /// Sorted by start, not overlapping.
    functions: Vec<Function>,
    data: Vec<(String, u64)>,
}

impl Symbols {
    pub fn from_elf_file(path: &Path) -> Result<Symbols> {
        let bytes = std::fs::read(path).map_err(|e| Error::Host("reading the kernel's symbols", e))?;
        Symbols::from_elf(&bytes)
            .map_err(|e| Error::Config(format!("{}: cannot read its symbol table: {e}", path.display())))
    }

    pub fn from_elf(bytes: &[u8]) -> std::result::Result<Symbols, String> {
        let file = object::File::parse(bytes).map_err(|e| e.to_string())?;
        let mut functions = Vec::new();
        let mut data = Vec::new();
        for sym in file.symbols() {
            let Ok(name) = sym.name() else { continue };
            if name.is_empty() || sym.address() == 0 {
                continue;
            }
            // Assembly entry points (`asm_exc_page_fault`) have no type:
            // they count as functions when their section holds code.
            let in_code = sym
                .section_index()
                .and_then(|i| file.section_by_index(i).ok())
                .is_some_and(|sec| sec.kind() == SectionKind::Text);
            let kind = match sym.kind() {
                SymbolKind::Unknown | SymbolKind::Label if in_code => SymbolKind::Text,
                kind => kind,
            };
            match kind {
                SymbolKind::Text => functions.push(Function {
                    start: sym.address(),
                    end: sym.address() + sym.size(),
                    name: name.to_owned(),
                }),
                SymbolKind::Data => data.push((name.to_owned(), sym.address())),
                _ => {}
            }
        }
        if functions.is_empty() {
            return Err("no function symbols (a stripped file?)".into());
        }
        functions.sort_by_key(|f| (f.start, std::cmp::Reverse(f.end)));
        functions.dedup_by_key(|f| f.start);
        // Symbols without a size (assembly) extend to the next symbol.
        for i in 0..functions.len() {
            let next = functions.get(i + 1).map_or(u64::MAX, |f| f.start);
            let f = &mut functions[i];
            if f.end <= f.start || f.end > next {
                f.end = next;
            }
        }
        Ok(Symbols { functions, data })
    }

    /// The function containing `addr`.
    pub fn function(&self, addr: u64) -> Option<&str> {
        let i = self.functions.partition_point(|f| f.start <= addr).checked_sub(1)?;
        let f = &self.functions[i];
        (addr < f.end).then_some(f.name.as_str())
    }

    /// The address of the data symbol `name`.
    pub fn data(&self, name: &str) -> Option<u64> {
        self.data.iter().find(|(n, _)| n == name).map(|&(_, a)| a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_test_binary() {
        let exe = std::env::current_exe().unwrap();
        let symbols = Symbols::from_elf_file(&exe).unwrap();
        // Find this function by name (a PIE is loaded at an offset, so its
        // runtime address would not match), then look its extent up.
        let f = symbols.functions.iter().find(|f| f.name.contains("reads_this_test_binary")).unwrap();
        assert_eq!(symbols.function(f.start), Some(f.name.as_str()));
        assert!(symbols.function(f.start.wrapping_sub(1)).is_none_or(|n| n != f.name));
        assert!(Symbols::from_elf(b"not an elf").is_err());
    }
}
