//! Input bounds: deep nesting and huge files end quickly in a diagnostic — never a stack
//! overflow, a hang or a panic. Each case runs on a thread with a small stack, so a missing
//! depth limit shows up as a crash here rather than on a user's machine.

mod common;

use streamc::diag::Code;

/// Small enough that unbounded recursion over 10,000 levels overflows it.
const SMALL_STACK: usize = 1 << 20;

fn on_small_stack<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> R {
    std::thread::Builder::new().stack_size(SMALL_STACK).spawn(f).unwrap().join().expect("the front end crashed")
}

const HEAD: &str = "stream s from \"s\" { value json { a: int, b: bool, t: string } }\n";

fn program(clause: &str) -> String {
    format!("{HEAD}query q {{\n  from s\n  {clause}\n  to \"out\"\n}}\n")
}

/// Compile on a small stack and return the diagnostic codes.
fn codes_of(src: String) -> Vec<Code> {
    on_small_stack(move || match common::compile(&src) {
        Ok(_) => Vec::new(),
        Err(d) => {
            assert!(common::spans_valid(&d, &src));
            d.iter().map(|d| d.code).collect()
        }
    })
}

fn assert_too_deep(src: String) {
    let codes = codes_of(src);
    assert!(codes.contains(&Code::TooDeep), "expected E0101, got {codes:?}");
}

const N: usize = 10_000;

#[test]
fn nested_parentheses() {
    assert_too_deep(program(&format!("where {}a{} > 0", "(".repeat(N), ")".repeat(N))));
}

#[test]
fn prefix_chains() {
    assert_too_deep(program(&format!("where {} b", "not ".repeat(N))));
    assert_too_deep(program(&format!("select {{ x = {}a }}", "- ".repeat(N))));
}

#[test]
fn else_if_chains() {
    let chain = "if b then 1 else ".repeat(N);
    assert_too_deep(program(&format!("select {{ x = {chain}0 }}")));
}

/// A run of arithmetic operators of one precedence is a list too: 10,000 terms check fine on
/// a small stack, and a type error deep inside is reported at its own operand.
#[test]
fn long_operator_chains_are_lists() {
    let codes = codes_of(program(&format!("select {{ x = a{} }}", " + a - 1".repeat(N))));
    assert!(codes.is_empty(), "{codes:?}");
    let codes = codes_of(program(&format!("select {{ x = a{} }}", " * 2 / a % 7".repeat(N))));
    assert!(codes.is_empty(), "{codes:?}");
    let mixed = format!("select {{ x = a{} + b{} }}", " + a".repeat(N), " + a".repeat(N));
    let src = program(&mixed);
    let errors = on_small_stack(move || common::compile(&src).err().unwrap_or_default());
    assert_eq!(errors.iter().map(|d| d.code).collect::<Vec<_>>(), vec![Code::BadOperands], "{errors:?}");
    assert!(errors[0].message.contains("int and bool"), "{}", errors[0].message);
    assert_too_deep(program(&format!("select {{ x = {}a{} }}", "(a + ".repeat(N), ")".repeat(N))));
}

/// A run of one logical operator is a list, not nesting: 10,000 `or`ed comparisons (or `and`ed
/// conditions) check fine on a small stack. Mixed with parentheses, nesting still counts.
#[test]
fn long_logical_chains_are_lists() {
    let ors: Vec<String> = (0..N).map(|i| format!("a == {i}")).collect();
    let codes = codes_of(program(&format!("where {}", ors.join(" or "))));
    assert!(codes.is_empty(), "{codes:?}");
    let ands: Vec<String> = (0..N).map(|i| format!("a != {i}")).collect();
    let codes = codes_of(program(&format!("where {}", ands.join(" and "))));
    assert!(codes.is_empty(), "{codes:?}");
    assert_too_deep(program(&format!("where {}b{}", "(b or ".repeat(N), ")".repeat(N))));
}

#[test]
fn nested_calls_lists_and_records() {
    assert_too_deep(program(&format!("select {{ x = {}a{} }}", "abs(".repeat(N), ")".repeat(N))));
    assert_too_deep(program(&format!("select {{ x = {}1{} }}", "[".repeat(N), "]".repeat(N))));
    assert_too_deep(program(&format!("select {{ x = {}1{} }}", "{ y = ".repeat(N), " }".repeat(N))));
}

#[test]
fn nested_schema_types() {
    let ty = format!("{}int{}", "{ a: ".repeat(N), " }".repeat(N));
    assert_too_deep(format!("stream s from \"s\" {{ value json {{ x: {ty} }} }}\n"));
    let list = format!("{}int{}", "list<".repeat(N), ">".repeat(N));
    assert_too_deep(format!("stream s from \"s\" {{ value json {{ x: {list} }} }}\n"));
}

#[test]
fn deep_control_statements() {
    let text = format!("update t[\"k\"] = {}1{}", "{ a = ".repeat(N), " }".repeat(N));
    let codes = on_small_stack(move || match streamc::syntax::parse_statement(&text) {
        Ok(_) => Vec::new(),
        Err(d) => d.iter().map(|d| d.code).collect(),
    });
    assert!(codes.contains(&Code::TooDeep), "{codes:?}");
}

#[test]
fn moderate_nesting_is_accepted() {
    // The limit is far above what people write: 60 levels of parentheses check fine.
    let codes = codes_of(program(&format!("where {}a{} > 0", "(".repeat(60), ")".repeat(60))));
    assert!(codes.is_empty(), "{codes:?}");
}

#[test]
fn multi_megabyte_files_are_refused() {
    let big = format!("{HEAD}{}", "# padding\n".repeat(500_000));
    assert_eq!(codes_of(big), vec![Code::TooLarge]);
}

#[test]
fn large_valid_programs_compile() {
    // Just under the size limit: hundreds of queries check, on a small stack.
    let mut src = HEAD.to_string();
    let mut i = 0;
    while src.len() < streamc::syntax::MAX_SOURCE_BYTES - 200 {
        src += &format!(
            "query q{i} {{ from s where a > {i} and b select {{ a, t = concat(t, \"{i}\") }} to \"out{i}\" }}\n"
        );
        i += 1;
    }
    assert!(i > 5_000);
    assert_eq!(codes_of(src), vec![]);
}
