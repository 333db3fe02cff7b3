//! A pass over an Avro datum that decodes nothing, made before apache-avro decodes it.
//!
//! apache-avro recurses once per nested value (a recursive schema — a linked list, a tree —
//! lets a record nest as deep as it has bytes, and the stack overflows), and it reserves a
//! block's declared item count before reading an item (a block of 2^28 nulls takes no bytes
//! and reserves gigabytes; `max_allocation_bytes` limits the count, not what it reserves).
//! This pass follows the schema over the bytes with no allocation: every length must fit in
//! what remains, values may nest [`MAX_DEPTH`] deep, and a datum may hold one value per byte
//! plus [`SPARE_VALUES`] (what a value of no bytes, a null, may add).

use std::collections::HashMap;

use apache_avro::Schema;

use crate::Refusal;

/// How deep values may nest.
pub(crate) const MAX_DEPTH: usize = 64;

/// Values a datum may hold beyond one per byte.
pub(crate) const SPARE_VALUES: usize = 1024;

/// The process-wide bound apache-avro puts on one length (a string, bytes, a block's count,
/// an object-container block): Floe's records and Iceberg manifests stay far below it.
pub const MAX_ALLOCATION_BYTES: usize = 64 << 20;

/// Sets apache-avro's allocation bound ([`MAX_ALLOCATION_BYTES`]). Process-wide, and the first
/// call (or apache-avro's first decode, which takes its 512 MiB default) wins: call it at
/// startup before anything reads Avro. Returns the bound in force.
pub fn bound_allocations() -> usize {
    apache_avro::util::max_allocation_bytes(MAX_ALLOCATION_BYTES)
}

/// Checks that decoding `datum` with `schema` (named types in `names`) is bounded.
pub(crate) fn check(
    schema: &Schema,
    names: &HashMap<String, Schema>,
    datum: &[u8],
) -> Result<(), Refusal> {
    // In case startup did not (tests, embedders): before apache-avro's first decode.
    bound_allocations();
    let mut scan = Scan {
        rest: datum,
        names,
        values_left: datum.len().saturating_add(SPARE_VALUES),
    };
    scan.value(schema, 0)
}

struct Scan<'a> {
    rest: &'a [u8],
    names: &'a HashMap<String, Schema>,
    values_left: usize,
}

impl Scan<'_> {
    fn value(&mut self, schema: &Schema, depth: usize) -> Result<(), Refusal> {
        if depth > MAX_DEPTH {
            return Err(Refusal::unsupported(format!(
                "values nest deeper than {MAX_DEPTH} levels"
            )));
        }
        self.take_values(1)?;
        let schema = match schema {
            Schema::Ref { name } => self.names.get(&name.fullname(None)).ok_or_else(|| {
                Refusal::malformed(format!(
                    "a reference to the unknown type {}",
                    name.fullname(None)
                ))
            })?,
            other => other,
        };
        match schema {
            Schema::Null => Ok(()),
            Schema::Boolean => self.skip(1),
            Schema::Int
            | Schema::Long
            | Schema::Enum(_)
            | Schema::Date
            | Schema::TimeMillis
            | Schema::TimeMicros
            | Schema::TimestampMillis
            | Schema::TimestampMicros
            | Schema::TimestampNanos
            | Schema::LocalTimestampMillis
            | Schema::LocalTimestampMicros
            | Schema::LocalTimestampNanos => self.long().map(|_| ()),
            Schema::Float => self.skip(4),
            Schema::Double => self.skip(8),
            Schema::Duration => self.skip(12),
            Schema::Fixed(fixed) => self.skip(fixed.size as u64),
            Schema::Bytes | Schema::String | Schema::BigDecimal | Schema::Uuid => {
                let length = self.long()?;
                let length = u64::try_from(length)
                    .map_err(|_| Refusal::malformed(format!("a negative length ({length})")))?;
                self.skip(length)
            }
            Schema::Decimal(decimal) => self.value(&decimal.inner, depth),
            Schema::Union(union) => {
                let index = self.long()?;
                let variant = usize::try_from(index)
                    .ok()
                    .and_then(|i| union.variants().get(i))
                    .ok_or_else(|| {
                        Refusal::malformed(format!("union branch {index} is not in the schema"))
                    })?;
                self.value(variant, depth + 1)
            }
            Schema::Record(record) => {
                for field in &record.fields {
                    self.value(&field.schema, depth + 1)?;
                }
                Ok(())
            }
            Schema::Array(array) => self.blocks(|scan| scan.value(&array.items, depth + 1)),
            Schema::Map(map) => self.blocks(|scan| {
                scan.value(&Schema::String, depth + 1)?;
                scan.value(&map.types, depth + 1)
            }),
            Schema::Ref { name } => Err(Refusal::unsupported(format!(
                "a reference to the reference {}",
                name.fullname(None)
            ))),
        }
    }

    /// An array's or map's blocks: a count (negative: followed by the block's size), then
    /// that many items, until a count of zero.
    fn blocks(
        &mut self,
        mut item: impl FnMut(&mut Self) -> Result<(), Refusal>,
    ) -> Result<(), Refusal> {
        loop {
            let count = self.long()?;
            if count == 0 {
                return Ok(());
            }
            if count < 0 {
                self.long()?;
            }
            let count = count.unsigned_abs();
            // Checked before any item: apache-avro reserves the count at once.
            if count > self.values_left as u64 {
                return Err(Refusal::malformed(format!(
                    "a block of {count} items, more than a record of its size holds"
                )));
            }
            for _ in 0..count {
                item(self)?;
            }
        }
    }

    fn take_values(&mut self, count: usize) -> Result<(), Refusal> {
        self.values_left = self
            .values_left
            .checked_sub(count)
            .ok_or_else(|| Refusal::malformed("more values than a record of its size holds"))?;
        Ok(())
    }

    fn skip(&mut self, length: u64) -> Result<(), Refusal> {
        if length > self.rest.len() as u64 {
            return Err(Refusal::malformed(format!(
                "a value of {length} bytes where {} remain",
                self.rest.len()
            )));
        }
        self.rest = &self.rest[length as usize..];
        Ok(())
    }

    /// A zigzag varint of at most ten bytes.
    fn long(&mut self) -> Result<i64, Refusal> {
        let mut value: u64 = 0;
        for shift in (0..70).step_by(7) {
            let (&byte, rest) = self
                .rest
                .split_first()
                .ok_or_else(|| Refusal::malformed("the record ends inside a number"))?;
            self.rest = rest;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok((value >> 1) as i64 ^ -((value & 1) as i64));
            }
        }
        Err(Refusal::malformed("a number longer than ten bytes"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zigzag(v: i64) -> Vec<u8> {
        let mut n = ((v << 1) ^ (v >> 63)) as u64;
        let mut out = Vec::new();
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(byte);
                return out;
            }
            out.push(byte | 0x80);
        }
    }

    fn schema(text: &str) -> (Schema, HashMap<String, Schema>) {
        let schema = Schema::parse_str(text).unwrap();
        let mut names = HashMap::new();
        if let Schema::Record(record) = &schema {
            names.insert(record.name.fullname(None), schema.clone());
        }
        (schema, names)
    }

    #[test]
    fn a_block_of_many_nulls_is_refused_before_decoding() {
        let (schema, names) = schema(
            r#"{"type": "record", "name": "r", "fields": [{"name": "a", "type": {"type": "array", "items": "null"}}]}"#,
        );
        let mut datum = zigzag(1 << 28);
        datum.extend(zigzag(0));
        let refused = check(&schema, &names, &datum).unwrap_err().to_string();
        assert!(refused.contains("a block of 268435456 items"), "{refused}");
        let mut small = zigzag(3);
        small.extend(zigzag(0));
        check(&schema, &names, &small).unwrap();
        assert!(apache_avro::from_avro_datum(&schema, &mut small.as_slice(), None).is_ok());
    }

    #[test]
    fn recursive_records_nest_only_so_deep() {
        // A linked list: each level is one byte (the union's branch).
        let (schema, names) = schema(
            r#"{"type": "record", "name": "node", "fields": [{"name": "next", "type": ["null", "node"]}]}"#,
        );
        let mut deep = vec![2u8; 100_000];
        deep.push(0);
        let refused = check(&schema, &names, &deep).unwrap_err().to_string();
        assert!(refused.contains("deeper than 64"), "{refused}");
        let mut shallow = vec![2u8; 20];
        shallow.push(0);
        check(&schema, &names, &shallow).unwrap();
    }

    #[test]
    fn lengths_past_the_end_are_refused() {
        let (schema, names) = schema(
            r#"{"type": "record", "name": "r", "fields": [{"name": "s", "type": "string"}]}"#,
        );
        let datum = zigzag(1 << 40);
        assert!(
            check(&schema, &names, &datum)
                .unwrap_err()
                .to_string()
                .contains("bytes where 0 remain")
        );
        assert!(
            check(&schema, &names, &zigzag(-3))
                .unwrap_err()
                .to_string()
                .contains("negative length")
        );
        assert!(check(&schema, &names, &[0x80; 12]).is_err());
    }

    #[test]
    fn the_allocation_bound_is_set_once() {
        assert_eq!(bound_allocations(), MAX_ALLOCATION_BYTES);
        assert_eq!(
            apache_avro::util::max_allocation_bytes(1),
            MAX_ALLOCATION_BYTES
        );
    }
}
