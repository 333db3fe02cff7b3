//! What a token is, for the index and for `matches` alike.
//!
//! A token is a maximal run of alphanumeric characters (`char::is_alphanumeric`: Unicode's
//! `Alphabetic` or `Numeric`), compared in lowercase — each character lowercased on its own
//! (`char::to_lowercase`), so that lowercasing a text is lowercasing its pieces one after
//! another (`str::to_lowercase` treats a final Greek sigma by its context, which would break
//! that). Everything else separates tokens: `req-7f3a_9c` holds `req`, `7f3a` and `9c`.
//!
//! The index and `matches` share [`for_each_token`], so a token `matches` looks for is the
//! very token the index recorded. [`like_tokens`] derives, from a `LIKE` pattern, the tokens
//! every value it matches must hold whole.

/// Calls `each` with every token of `text`, lowercased, in order (with repeats). `buffer` is
/// scratch space, reused across calls.
pub(crate) fn for_each_token(text: &str, buffer: &mut String, mut each: impl FnMut(&str)) {
    let bytes = text.as_bytes();
    if bytes.is_ascii() {
        // The common case, without decoding characters.
        let mut start = None;
        for (i, b) in bytes.iter().enumerate() {
            match (b.is_ascii_alphanumeric(), start) {
                (true, None) => start = Some(i),
                (false, Some(s)) => {
                    ascii_token(&text[s..i], buffer, &mut each);
                    start = None;
                }
                _ => {}
            }
        }
        if let Some(s) = start {
            ascii_token(&text[s..], buffer, &mut each);
        }
        return;
    }
    buffer.clear();
    for c in text.chars() {
        if c.is_alphanumeric() {
            buffer.extend(c.to_lowercase());
        } else if !buffer.is_empty() {
            each(buffer);
            buffer.clear();
        }
    }
    if !buffer.is_empty() {
        each(buffer);
    }
}

fn ascii_token(token: &str, buffer: &mut String, each: &mut impl FnMut(&str)) {
    if token.bytes().any(|b| b.is_ascii_uppercase()) {
        buffer.clear();
        buffer.push_str(token);
        buffer.make_ascii_lowercase();
        each(buffer);
    } else {
        each(token);
    }
}

/// The distinct tokens of `text`, lowercased, in order of first appearance.
pub(crate) fn tokens(text: &str) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    let mut buffer = String::new();
    for_each_token(text, &mut buffer, |t| {
        if !found.iter().any(|f| f == t) {
            found.push(t.to_string());
        }
    });
    found
}

/// The tokens every value matching the `LIKE` pattern `pattern` (escape character `\`, as
/// DataFusion's `LIKE` takes it) holds whole, lowercased; `None` when the pattern cannot be
/// read (a dangling escape).
///
/// A literal stretch of the pattern appears as it is in every matching value. A token of the
/// stretch that does not touch a wildcard is, in the value, a maximal alphanumeric run too:
/// the characters beside it are the stretch's own non-alphanumeric ones, or the value's start
/// or end where the pattern is anchored there. A token touching `%` or `_` may be part of a
/// longer run in the value (`'%timeout%'` matches `timeouts`), so it says nothing.
pub(crate) fn like_tokens(pattern: &str) -> Option<Vec<String>> {
    // The pattern as literal stretches, each with whether a wildcard stands before and after.
    let mut stretches: Vec<(String, bool, bool)> = Vec::new();
    let mut current = String::new();
    let mut wild_before = false;
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => current.push(chars.next()?),
            '%' | '_' => {
                stretches.push((std::mem::take(&mut current), wild_before, true));
                wild_before = true;
            }
            c => current.push(c),
        }
    }
    stretches.push((current, wild_before, false));
    let mut found: Vec<String> = Vec::new();
    for (stretch, open_start, open_end) in stretches {
        // The stretch's tokens with whether each touches its start or end.
        let mut runs: Vec<(usize, usize)> = Vec::new();
        let mut start = None;
        for (i, c) in stretch.char_indices() {
            match (c.is_alphanumeric(), start) {
                (true, None) => start = Some(i),
                (false, Some(s)) => {
                    runs.push((s, i));
                    start = None;
                }
                _ => {}
            }
        }
        if let Some(s) = start {
            runs.push((s, stretch.len()));
        }
        for (s, e) in runs {
            if (s == 0 && open_start) || (e == stretch.len() && open_end) {
                continue;
            }
            for token in tokens(&stretch[s..e]) {
                if !found.contains(&token) {
                    found.push(token);
                }
            }
        }
    }
    Some(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_lowercased_alphanumeric_runs() {
        assert_eq!(
            tokens("GET /api/v1/Orders?id=42 took 3.5ms; req-7F3a_9c"),
            [
                "get", "api", "v1", "orders", "id", "42", "took", "3", "5ms", "req", "7f3a", "9c"
            ]
        );
        assert_eq!(
            tokens("Ünïcode ÉCOLE straße Σίσυφος"),
            ["ünïcode", "école", "straße", "σίσυφος"]
        );
        assert!(tokens(" -- ").is_empty());
        assert_eq!(tokens("a a A"), ["a"]);
    }

    #[test]
    fn lowercasing_is_piecewise() {
        // What `matches` compares must not depend on where a token is cut from its text.
        let text = "ΟΔΟΣ ΣΑΣ";
        let mut whole = Vec::new();
        let mut buffer = String::new();
        for_each_token(text, &mut buffer, |t| whole.push(t.to_string()));
        let mut parts = Vec::new();
        for part in text.split(' ') {
            for_each_token(part, &mut buffer, |t| parts.push(t.to_string()));
        }
        assert_eq!(whole, parts);
    }

    #[test]
    fn like_keeps_only_tokens_bounded_inside_the_pattern() {
        let like = |p: &str| like_tokens(p).unwrap();
        assert!(like("%timeout%").is_empty());
        assert_eq!(like("% timeout %"), ["timeout"]);
        assert_eq!(like("%request 7f3a done%"), ["7f3a"]);
        assert_eq!(like("Timeout calling %"), ["timeout", "calling"]);
        assert_eq!(like("%calling gateway"), ["gateway"]);
        assert_eq!(like("exact text"), ["exact", "text"]);
        assert_eq!(like("%a_b c%"), Vec::<String>::new());
        assert_eq!(like("%x \\%y %"), ["y"]);
        assert_eq!(like(r"%\_id %"), ["id"]);
        assert!(like_tokens("abc\\").is_none());
    }
}
