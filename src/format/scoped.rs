//! State keys scoped to a tenant: the bytes that keep tenants' state apart (see ARCHITECTURE.md,
//! "Tenants: how state is scoped").

/// `key` scoped to `tenant`: length, id, key.
pub fn scope(tenant: &[u8], key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(4 + tenant.len() + key.len());
    k.extend_from_slice(&(tenant.len() as u32).to_be_bytes());
    k.extend_from_slice(tenant);
    k.extend_from_slice(key);
    k
}

/// The (tenant, key) of a scoped key; None if the bytes are not one.
pub fn split(scoped: &[u8]) -> Option<(&[u8], &[u8])> {
    let n = u32::from_be_bytes(scoped.get(..4)?.try_into().ok()?) as usize;
    let rest = &scoped[4..];
    (rest.len() >= n).then(|| rest.split_at(n))
}

/// The prefix every key scoped to `tenant` starts with, and no other key does.
pub fn prefix(tenant: &[u8]) -> Vec<u8> {
    scope(tenant, &[])
}

/// A tenant id in JSON (the output key and the `tenant` field): a string when it is UTF-8, else
/// the array of its bytes, so that two ids never print alike.
pub fn write_json(t: &[u8], out: &mut Vec<u8>) {
    match std::str::from_utf8(t) {
        Ok(s) => crate::value::write_str(s, out),
        Err(_) => {
            out.push(b'[');
            for (i, b) in t.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(itoa::Buffer::new().format(*b).as_bytes());
            }
            out.push(b']');
        }
    }
}
