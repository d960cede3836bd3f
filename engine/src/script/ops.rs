//! The operations of the bootstrap's `host(op, a?, b?)`, declared once ([`HostOp`]): the Rust side
//! matches on the enum, and the bootstrap receives each op's number in its configuration under
//! the op's name ([`HostOp::numbers`]), so no number is written twice.

use std::collections::BTreeMap;

/// One operation the bootstrap asks of the host; its discriminant is the number `host` receives.
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HostOp {
    /// `text(value)`.
    Text = 1,
    /// `image(urlOrItem, detail?)`.
    Image = 2,
    /// `audio(urlOrItem)`.
    Audio = 3,
    /// `store(key, value)`.
    Store = 4,
    /// `load(key)`.
    Load = 5,
    /// `notify(value)`.
    Notify = 6,
    /// `yield_control()`.
    Yield = 7,
    /// `exit()`.
    Exit = 8,
    /// A call of one of `tools.*`.
    ToolCall = 9,
    /// `setTimeout(callback, delay, ...args)`.
    SetTimeout = 10,
    /// `clearTimeout(id)`.
    ClearTimeout = 11,
    /// `generatedImage(result)`.
    GeneratedImage = 12,
    /// `__codemode_test_panic()`, a global that exists only with test hooks on.
    TestPanic = 99,
}

impl HostOp {
    /// Every op.
    pub const ALL: [HostOp; 13] = [
        HostOp::Text,
        HostOp::Image,
        HostOp::Audio,
        HostOp::Store,
        HostOp::Load,
        HostOp::Notify,
        HostOp::Yield,
        HostOp::Exit,
        HostOp::ToolCall,
        HostOp::SetTimeout,
        HostOp::ClearTimeout,
        HostOp::GeneratedImage,
        HostOp::TestPanic,
    ];

    /// The op `host` was called with, if `number` is one.
    pub fn from_number(number: i32) -> Option<HostOp> {
        HostOp::ALL.into_iter().find(|op| *op as i32 == number)
    }

    /// The name the bootstrap knows the op by (`TEXT` for `OP_TEXT`).
    pub fn name(self) -> &'static str {
        match self {
            HostOp::Text => "TEXT",
            HostOp::Image => "IMAGE",
            HostOp::Audio => "AUDIO",
            HostOp::Store => "STORE",
            HostOp::Load => "LOAD",
            HostOp::Notify => "NOTIFY",
            HostOp::Yield => "YIELD",
            HostOp::Exit => "EXIT",
            HostOp::ToolCall => "TOOL_CALL",
            HostOp::SetTimeout => "SET_TIMEOUT",
            HostOp::ClearTimeout => "CLEAR_TIMEOUT",
            HostOp::GeneratedImage => "GENERATED_IMAGE",
            HostOp::TestPanic => "TEST_PANIC",
        }
    }

    /// Each op's number by its name: what the bootstrap's configuration carries as `ops`.
    pub fn numbers() -> BTreeMap<&'static str, i32> {
        HostOp::ALL
            .into_iter()
            .map(|op| (op.name(), op as i32))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_op_is_found_by_its_number_and_no_two_share_one() {
        for op in HostOp::ALL {
            assert_eq!(HostOp::from_number(op as i32), Some(op));
        }
        assert_eq!(HostOp::numbers().len(), HostOp::ALL.len());
        let mut numbers: Vec<i32> = HostOp::ALL.into_iter().map(|op| op as i32).collect();
        numbers.sort_unstable();
        numbers.dedup();
        assert_eq!(numbers.len(), HostOp::ALL.len());
        assert_eq!(HostOp::from_number(0), None);
        assert_eq!(HostOp::from_number(13), None);
    }

    /// The bootstrap takes its op constants from the configuration by name: it must name every op
    /// (a name it lacks would leave a global that calls `host` with `undefined`), and no other.
    #[test]
    fn the_bootstrap_takes_every_op_from_its_configuration() {
        let bootstrap = super::super::BOOTSTRAP_JS;
        let start = bootstrap
            .find("const {")
            .expect("the bootstrap destructures its ops");
        let end = start
            + bootstrap[start..]
                .find("} = config.ops;")
                .expect("from config.ops");
        let mut named: Vec<String> = bootstrap[start + "const {".len()..end]
            .split(',')
            .map(|binding| binding.trim())
            .filter(|binding| !binding.is_empty())
            .map(|binding| {
                let (name, constant) = binding.split_once(':').expect("NAME: OP_NAME");
                assert_eq!(constant.trim(), format!("OP_{}", name.trim()));
                name.trim().to_owned()
            })
            .collect();
        named.sort();
        let mut ours: Vec<String> = HostOp::numbers().keys().map(|n| (*n).to_owned()).collect();
        ours.sort();
        assert_eq!(named, ours);
        assert!(
            !bootstrap.contains("const OP_"),
            "the bootstrap writes an op number of its own"
        );
    }
}
