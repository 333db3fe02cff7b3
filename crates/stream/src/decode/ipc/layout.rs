//! The field nodes and buffers a batch's columns take, walked in the order arrow's reader
//! takes them, so that it never runs out of either (it `unwrap`s and asserts) and never
//! reads a validity bitmap shorter than its rows (a struct's panics).

use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::ipc::FieldNode;

use crate::Refusal;

/// Checks a batch's nodes and buffers (their decoded `lengths`) against its `columns`.
pub(super) fn check(
    what: &str,
    columns: &[&DataType],
    nodes: &[&FieldNode],
    lengths: &[usize],
    variadic: &[i64],
) -> Result<(), Refusal> {
    let mut walk = Walk {
        what,
        nodes,
        lengths,
        variadic,
        node: 0,
        buffer: 0,
        view: 0,
    };
    for column in columns {
        walk.column(column)?;
    }
    if walk.view != variadic.len() {
        return Err(Refusal::malformed(format!(
            "{what} has {} variadic buffer counts for {} view columns",
            variadic.len(),
            walk.view
        )));
    }
    Ok(())
}

struct Walk<'a> {
    what: &'a str,
    nodes: &'a [&'a FieldNode],
    lengths: &'a [usize],
    variadic: &'a [i64],
    node: usize,
    buffer: usize,
    view: usize,
}

impl Walk<'_> {
    fn column(&mut self, data_type: &DataType) -> Result<(), Refusal> {
        let node = self.next_node(data_type)?;
        match data_type {
            DataType::Null => Ok(()),
            DataType::Utf8 | DataType::Binary => {
                self.validity(node)?;
                self.typed(4)?;
                self.buffers(1)
            }
            DataType::LargeUtf8 | DataType::LargeBinary => {
                self.validity(node)?;
                self.typed(8)?;
                self.buffers(1)
            }
            DataType::Utf8View | DataType::BinaryView => {
                self.validity(node)?;
                self.typed(16)?;
                let count = *self.variadic.get(self.view).ok_or_else(|| {
                    Refusal::malformed(format!(
                        "{} lacks the variadic buffer count of a view column",
                        self.what
                    ))
                })?;
                self.view += 1;
                let count = usize::try_from(count)
                    .ok()
                    .filter(|c| *c <= self.lengths.len())
                    .ok_or_else(|| {
                        Refusal::malformed(format!(
                            "{} declares {count} variadic buffers",
                            self.what
                        ))
                    })?;
                self.buffers(count)
            }
            DataType::List(child) | DataType::Map(child, _) => {
                self.validity(node)?;
                self.typed(4)?;
                self.column(child.data_type())
            }
            DataType::LargeList(child) => {
                self.validity(node)?;
                self.typed(8)?;
                self.column(child.data_type())
            }
            DataType::FixedSizeList(child, _) => {
                self.validity(node)?;
                self.column(child.data_type())
            }
            DataType::Struct(fields) => {
                self.validity(node)?;
                for field in fields {
                    self.column(field.data_type())?;
                }
                Ok(())
            }
            // The indices; the values come in dictionary batches.
            DataType::Dictionary(key, _) => {
                self.validity(node)?;
                self.typed(key.primitive_width().unwrap_or(1))
            }
            DataType::Boolean | DataType::FixedSizeBinary(_) => {
                self.validity(node)?;
                self.buffers(1)
            }
            t if t.is_primitive() => {
                self.validity(node)?;
                self.typed(t.primitive_width().unwrap_or(1))
            }
            other => Err(Refusal::unsupported(format!(
                "{other} columns are not taken"
            ))),
        }
    }

    fn next_node(&mut self, data_type: &DataType) -> Result<FieldNode, Refusal> {
        let node = self.nodes.get(self.node).ok_or_else(|| {
            Refusal::malformed(format!(
                "{} has {} field nodes, too few for its columns (a {data_type} column lacks one)",
                self.what,
                self.nodes.len()
            ))
        })?;
        self.node += 1;
        Ok(**node)
    }

    fn buffers(&mut self, count: usize) -> Result<(), Refusal> {
        if self.buffer + count > self.lengths.len() {
            return Err(Refusal::malformed(format!(
                "{} has {} buffers, too few for its columns",
                self.what,
                self.lengths.len()
            )));
        }
        self.buffer += count;
        Ok(())
    }

    /// A buffer of values `width` bytes each: arrow's validation reads it as a slice of them,
    /// and asserts that its length is a multiple of the width.
    fn typed(&mut self, width: usize) -> Result<(), Refusal> {
        let index = self.buffer;
        self.buffers(1)?;
        if !self.lengths[index].is_multiple_of(width) {
            return Err(Refusal::malformed(format!(
                "buffer {index} of {} holds {} bytes, not a whole number of {width}-byte values",
                self.what, self.lengths[index]
            )));
        }
        Ok(())
    }

    /// A column's validity bitmap: when it has nulls, one bit per row.
    fn validity(&mut self, node: FieldNode) -> Result<(), Refusal> {
        let index = self.buffer;
        self.buffers(1)?;
        let needed = (node.length() as u64).div_ceil(8);
        if node.null_count() > 0 && (self.lengths[index] as u64) < needed {
            return Err(Refusal::malformed(format!(
                "buffer {index} of {} is a validity bitmap of {} bytes for {} rows",
                self.what,
                self.lengths[index],
                node.length()
            )));
        }
        Ok(())
    }
}
