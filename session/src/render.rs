//! The model-facing rendering of an observation (output and rendering): a status header, the wall time, the output
//! (cut to `max_output_tokens` with its head and tail kept and a marker stating the original size),
//! and for a failed cell its error with hints.
//!
//! ```text
//! Script completed | Script failed | Script terminated | Script running with cell ID <id>
//! Wall time 1.2 seconds
//! Output:
//! <items>
//! Script error:
//! <error text>
//! ```

use codemode_cell_actor::{CellEvent, ToolCallFate};
use codemode_protocol::OutputItem;
use codemode_protocol::limits::BYTES_PER_TOKEN;

use crate::session::CellReport;

/// Renders `report` for the model as content items: a text header, the output items (consecutive
/// texts joined), then the error, if any.
pub fn render_report(report: &CellReport, max_output_tokens: u64) -> Vec<OutputItem> {
    let mut header = match &report.event {
        CellEvent::Yielded { .. } => format!("Script running with cell ID {}", report.cell_id),
        CellEvent::Pending {
            pending_tool_call_ids,
            ..
        } => format!(
            "Script running with cell ID {}\nWaiting on tool calls: {}",
            report.cell_id,
            if pending_tool_call_ids.is_empty() {
                "(none new)".to_owned()
            } else {
                pending_tool_call_ids.join(", ")
            }
        ),
        CellEvent::Completed {
            error_text: None, ..
        } => "Script completed".to_owned(),
        CellEvent::Completed {
            error_text: Some(_),
            ..
        } => "Script failed".to_owned(),
        CellEvent::Terminated { .. } => "Script terminated".to_owned(),
        // An event this renderer does not know yet: say the script is still running.
        _ => format!("Script running with cell ID {}", report.cell_id),
    };
    header.push_str(&format!(
        "\nWall time {:.1} seconds\nOutput:",
        report.wall_time.as_secs_f64()
    ));
    let mut items = vec![OutputItem::text(header)];
    let output = report.event.output().clone().into_items();
    items.extend(truncate(join_texts(output), max_output_tokens));
    if let CellEvent::Terminated { tool_calls, .. } = &report.event
        && !tool_calls.is_empty()
    {
        let lines: Vec<String> = tool_calls
            .iter()
            .map(|call| {
                let fate = match call.fate {
                    ToolCallFate::Completed => "had completed",
                    ToolCallFate::Cancelled => "was running and was cancelled",
                    ToolCallFate::NotStarted => "was never started",
                };
                format!("- {} tools.{}: {fate}", call.id, call.name.global_name())
            })
            .collect();
        items.push(OutputItem::text(format!(
            "Tool calls at termination:\n{}",
            lines.join("\n")
        )));
    }
    if let CellEvent::Completed {
        error_text: Some(error_text),
        ..
    } = &report.event
    {
        let mut error = format!("Script error:\n{error_text}");
        for hint in &report.error_hints {
            error.push_str("\n\n");
            error.push_str(hint);
        }
        items.extend(truncate(vec![OutputItem::text(error)], max_output_tokens));
    }
    items
}

/// The rendering as one string, images shown as placeholders (for logs, snapshots, text-only
/// clients).
pub fn render_text(items: &[OutputItem]) -> String {
    items
        .iter()
        .map(|item| match item {
            OutputItem::Text { text } => text.clone(),
            OutputItem::Image(image) => {
                format!(
                    "[image: {} bytes, detail {}]",
                    image.image_url.len(),
                    image.detail
                )
            }
            OutputItem::Audio(audio) => format!("[audio: {} bytes]", audio.audio_url.len()),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Joins runs of text items with newlines, keeping images and audio in place.
fn join_texts(items: Vec<OutputItem>) -> Vec<OutputItem> {
    let mut joined: Vec<OutputItem> = Vec::new();
    for item in items {
        match (joined.last_mut(), item) {
            (Some(OutputItem::Text { text: previous }), OutputItem::Text { text }) => {
                previous.push('\n');
                previous.push_str(&text);
            }
            (_, item) => joined.push(item),
        }
    }
    joined
}

/// Cuts the text of `items` to `max_tokens` (≈ bytes / 4), keeping the head and the tail and
/// putting a marker with the original size where the middle was. Media in the cut middle are
/// dropped and counted in the marker.
pub fn truncate(items: Vec<OutputItem>, max_tokens: u64) -> Vec<OutputItem> {
    let budget = usize::try_from(max_tokens.saturating_mul(BYTES_PER_TOKEN)).unwrap_or(usize::MAX);
    let total: usize = items.iter().map(text_len).sum();
    if total <= budget {
        return items;
    }
    let head_budget = budget / 2;
    let tail_budget = budget - head_budget;
    // Walk from the front for the head, from the back for the tail; everything between is cut.
    let mut head: Vec<OutputItem> = Vec::new();
    let mut used = 0;
    let mut head_end = 0;
    for item in &items {
        let length = text_len(item);
        if used + length <= head_budget {
            head.push(item.clone());
            used += length;
            head_end += 1;
            continue;
        }
        if let OutputItem::Text { text } = item {
            let cut = head_cut(text, head_budget - used);
            if cut > 0 {
                head.push(OutputItem::text(&text[..cut]));
            }
        }
        break;
    }
    let mut tail: Vec<OutputItem> = Vec::new();
    let mut used = 0;
    let mut tail_start = items.len();
    for item in items.iter().rev() {
        if tail_start <= head_end {
            break;
        }
        let length = text_len(item);
        if used + length <= tail_budget {
            tail.push(item.clone());
            used += length;
            tail_start -= 1;
            continue;
        }
        if let OutputItem::Text { text } = item {
            let cut = tail_cut(text, tail_budget - used);
            if cut < text.len() {
                tail.push(OutputItem::text(&text[cut..]));
            }
        }
        break;
    }
    tail.reverse();
    let kept: usize = head.iter().chain(tail.iter()).map(text_len).sum();
    let dropped_media = items
        .iter()
        .take(tail_start.max(head_end))
        .skip(head_end)
        .filter(|item| !matches!(item, OutputItem::Text { .. }))
        .count();
    let media_note = if dropped_media > 0 {
        format!(", and {dropped_media} images or audio clips from the middle")
    } else {
        String::new()
    };
    let marker = format!(
        "[... output truncated: {total} bytes (about {} tokens) in all, over the limit of {max_tokens} \
         tokens; {} bytes from the middle were left out{media_note} ...]",
        total.div_ceil(BYTES_PER_TOKEN as usize),
        total - kept,
    );
    head.push(OutputItem::text(marker));
    head.extend(tail);
    head
}

fn text_len(item: &OutputItem) -> usize {
    match item {
        OutputItem::Text { text } => text.len(),
        _ => 0,
    }
}

/// Where to end a head of at most `budget` bytes: at the last line break in its second half if
/// there is one (so the head ends on a whole line), else at the last character boundary.
fn head_cut(text: &str, budget: usize) -> usize {
    let cut = floor_char_boundary(text, budget);
    match text[..cut].rfind('\n') {
        Some(line_end) if line_end >= cut / 2 => line_end,
        _ => cut,
    }
}

/// Where to start a tail of at most `budget` bytes: after the first line break in its first half
/// if there is one (so the tail starts on a whole line), else at the first character boundary.
fn tail_cut(text: &str, budget: usize) -> usize {
    let start = ceil_char_boundary(text, text.len() - budget.min(text.len()));
    match text[start..].find('\n') {
        Some(offset) if offset < budget / 2 => start + offset + 1,
        _ => start,
    }
}

fn floor_char_boundary(text: &str, mut index: usize) -> usize {
    index = index.min(text.len());
    while !text.is_char_boundary(index) {
        index -= 1;
    }
    index
}

fn ceil_char_boundary(text: &str, mut index: usize) -> usize {
    index = index.min(text.len());
    while !text.is_char_boundary(index) {
        index += 1;
    }
    index
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_within_the_budget_is_untouched() {
        let items = vec![OutputItem::text("short")];
        assert_eq!(truncate(items.clone(), 10), items);
    }

    #[test]
    fn long_output_keeps_head_and_tail_and_states_the_original_size() {
        let text: String = (0..1000).map(|n| format!("{n:04}")).collect();
        let items = truncate(vec![OutputItem::text(text.clone())], 100);
        let [
            OutputItem::Text { text: head },
            OutputItem::Text { text: marker },
            OutputItem::Text { text: tail },
        ] = items.as_slice()
        else {
            panic!("expected head, marker, tail: {items:?}")
        };
        assert_eq!(head.len() + tail.len(), 400);
        assert!(text.starts_with(head.as_str()) && text.ends_with(tail.as_str()));
        assert!(
            marker.contains("4000 bytes (about 1000 tokens) in all"),
            "{marker}"
        );
        assert!(marker.contains("3600 bytes from the middle"), "{marker}");
    }

    #[test]
    fn cuts_fall_on_line_boundaries_when_they_can() {
        let text: String = (0..100).map(|n| format!("line {n:02}\n")).collect();
        let items = truncate(vec![OutputItem::text(text)], 20);
        let OutputItem::Text { text: head } = &items[0] else {
            panic!()
        };
        let OutputItem::Text { text: tail } = items.last().unwrap() else {
            panic!()
        };
        assert!(head.lines().all(|line| line.len() == 7), "{head:?}");
        assert!(tail.lines().all(|line| line.len() == 7), "{tail:?}");
    }

    #[test]
    fn cutting_never_splits_a_character() {
        let items = truncate(vec![OutputItem::text("é".repeat(100))], 5);
        for item in items {
            let OutputItem::Text { text } = item else {
                panic!()
            };
            assert!(text.chars().all(|character| character == 'é') || text.starts_with("[..."));
        }
    }
}
