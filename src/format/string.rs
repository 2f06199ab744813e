//! `string` values: the bytes as text, one field.

use crate::format::{Target, ValueFormat};
use crate::types::RecordType;
use crate::value::Value;

/// The `string` format.
pub struct Text;

impl ValueFormat for Text {
    fn decode(&self, bytes: &[u8], _rt: &RecordType) -> Result<Vec<Value>, String> {
        Ok(vec![Value::str(&String::from_utf8_lossy(bytes))])
    }

    fn decode_some(&self, bytes: &[u8], rt: &RecordType, _want: &[usize]) -> Result<Vec<Option<Value>>, String> {
        // (Its one field is always wanted.)
        Ok(self.decode(bytes, rt)?.into_iter().map(Some).collect())
    }

    fn encode(
        &self,
        values: &[Value],
        _rt: &RecordType,
        _tenant: Option<&[u8]>,
        _target: Target,
        out: &mut Vec<u8>,
    ) -> Result<bool, String> {
        match values.first() {
            Some(Value::Str(s)) => out.extend_from_slice(s.as_bytes()),
            Some(Value::Null) | None => return Ok(false),
            Some(v) => out.extend_from_slice(v.to_string().as_bytes()),
        }
        Ok(true)
    }
}
