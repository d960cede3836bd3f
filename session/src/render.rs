//! The model-facing rendering of an observation (output and rendering): a status header, the wall time, the output
//! (fitted to `max_output_tokens` as upstream fits it: text alone with its head and tail kept and
//! a marker stating the original size, output with media budgeted in order, see [`fit_output`]),
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

use crate::report::CellReport;

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
    for waiting in &report.awaiting_approval {
        header.push_str(&format!(
            "\nWaiting for approval ({:.0} s): {} tools.{}({})",
            waiting.waited.as_secs_f64(),
            waiting.call_id,
            waiting.tool,
            waiting.arguments.replace('\n', " ")
        ));
    }
    if let Some(quiet) = &report.quiet {
        header.push_str(&format!(
            "\nNothing new for {:.1} seconds; call wait again to keep waiting.",
            quiet.quiet_for.as_secs_f64()
        ));
        if quiet.calls.is_empty() {
            header.push_str("\nNo tool call is running: the cell waits on timers or computes.");
        }
        for call in &quiet.calls {
            header.push_str(&format!(
                "\nWaiting on {} tools.{} (running for {:.0} s)",
                call.call_id,
                call.tool,
                call.running.as_secs_f64()
            ));
        }
    }
    header.push_str(&format!(
        "\nWall time {:.1} seconds\nOutput:",
        report.wall_time.as_secs_f64()
    ));
    let mut items = vec![OutputItem::text(header)];
    let output = report.event.output().clone().into_items();
    items.extend(fit_output(output, max_output_tokens));
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

/// Fits a cell's output to `max_tokens`, as upstream code mode does. Text alone is joined and cut
/// in the middle ([`truncate`]). Output with images or audio is budgeted in order, as upstream
/// budgets it: each text item costs its tokens (≈ bytes / 4, rounded up), the one that passes
/// the budget is cut in the middle to what is left, and later ones are left out; an image costs
/// nothing and is always kept; an audio clip costs its estimated tokens ([`audio_tokens`]) and
/// is left out when they pass what is left. What was left out is counted in a last line of each
/// kind (`[omitted 2 audio items ...]`). Consecutive texts that remain are then joined.
pub fn fit_output(items: Vec<OutputItem>, max_tokens: u64) -> Vec<OutputItem> {
    if items
        .iter()
        .all(|item| matches!(item, OutputItem::Text { .. }))
    {
        return truncate(join_texts(items), max_tokens);
    }
    let mut remaining = max_tokens;
    let mut kept = Vec::with_capacity(items.len());
    let (mut omitted_texts, mut omitted_audio) = (0usize, 0usize);
    for item in items {
        match item {
            OutputItem::Text { text } if text.is_empty() => {}
            OutputItem::Text { .. } if remaining == 0 => omitted_texts += 1,
            OutputItem::Text { text } => {
                let cost = tokens_of(&text);
                if cost <= remaining {
                    remaining -= cost;
                    kept.push(OutputItem::Text { text });
                } else {
                    kept.extend(truncate(vec![OutputItem::Text { text }], remaining));
                    remaining = 0;
                }
            }
            OutputItem::Audio(audio) => {
                let cost = audio_tokens(&audio.audio_url);
                if cost <= remaining {
                    remaining -= cost;
                    kept.push(OutputItem::Audio(audio));
                } else {
                    omitted_audio += 1;
                }
            }
            image => kept.push(image),
        }
    }
    if omitted_texts > 0 {
        kept.push(OutputItem::text(format!(
            "[omitted {omitted_texts} text items ...]"
        )));
    }
    if omitted_audio > 0 {
        kept.push(OutputItem::text(format!(
            "[omitted {omitted_audio} audio items ...]"
        )));
    }
    join_texts(kept)
}

/// The tokens a text costs: its bytes / 4, rounded up.
fn tokens_of(text: &str) -> u64 {
    (text.len() as u64).div_ceil(BYTES_PER_TOKEN)
}

/// The tokens an audio clip costs the output budget, as upstream estimates them: 10 per second of
/// its duration, read from the clip's container (WAV, MP3, MP4/M4A, Ogg, WebM); a clip whose
/// duration cannot be read costs its `data:` URL's bytes / 4.
pub fn audio_tokens(audio_url: &str) -> u64 {
    const TOKENS_PER_SECOND: f64 = 10.0;
    // The clip is the cell's: a container reader that panics on it costs the clip its estimate,
    // never the rendering.
    let duration = std::panic::catch_unwind(|| audio_duration_seconds(audio_url))
        .ok()
        .flatten();
    match duration {
        Some(seconds) if seconds.is_finite() && seconds >= 0.0 => {
            // Saturates at u64::MAX for an absurd duration.
            (seconds * TOKENS_PER_SECOND).ceil() as u64
        }
        _ => tokens_of(audio_url),
    }
}

/// The duration a base64 `data:` URL of audio declares in its container, without decoding the
/// audio itself.
fn audio_duration_seconds(audio_url: &str) -> Option<f64> {
    use base64::Engine as _;
    use symphonia::core::formats::FormatOptions;
    use symphonia::core::io::MediaSourceStream;
    use symphonia::core::meta::MetadataOptions;
    use symphonia::core::probe::Hint;

    let (header, payload) = audio_url.split_once(',')?;
    let mut parts = header.get("data:".len()..)?.split(';');
    let mime = parts.next()?.to_ascii_lowercase();
    let extension = match mime.as_str() {
        "audio/wav" | "audio/x-wav" | "audio/wave" | "audio/vnd.wave" => "wav",
        "audio/mpeg" | "audio/mp3" => "mp3",
        "audio/mp4" | "audio/m4a" | "audio/x-m4a" => "m4a",
        "audio/webm" => "webm",
        "audio/ogg" => "ogg",
        _ => return None,
    };
    if !parts.any(|part| part.eq_ignore_ascii_case("base64")) {
        return None;
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(payload)
        .ok()?;
    let stream = MediaSourceStream::new(Box::new(std::io::Cursor::new(bytes)), Default::default());
    let mut hint = Hint::new();
    hint.with_extension(extension);
    let probed = symphonia::default::get_probe()
        .format(
            &hint,
            stream,
            &FormatOptions::default(),
            &MetadataOptions::default(),
        )
        .ok()?;
    let parameters = &probed.format.default_track()?.codec_params;
    let frames = parameters.n_frames?;
    match (parameters.time_base, parameters.sample_rate) {
        (Some(time_base), _) => {
            let time = time_base.calc_time(frames);
            Some(time.seconds as f64 + time.frac)
        }
        (None, Some(rate)) if rate > 0 => Some(frames as f64 / f64::from(rate)),
        _ => None,
    }
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

    /// A WAV `data:` URL of `seconds` of silence (8 kHz, 8-bit, mono).
    fn wav(seconds: u32) -> String {
        use base64::Engine as _;
        let samples = 8000 * seconds;
        let mut bytes = Vec::new();
        bytes.extend_from_slice(b"RIFF");
        bytes.extend_from_slice(&(36 + samples).to_le_bytes());
        bytes.extend_from_slice(b"WAVEfmt ");
        for field in [16u32, 1 | (1 << 16), 8000, 8000, 1 | (8 << 16)] {
            bytes.extend_from_slice(&field.to_le_bytes());
        }
        bytes.extend_from_slice(b"data");
        bytes.extend_from_slice(&samples.to_le_bytes());
        bytes.resize(bytes.len() + samples as usize, 0x80);
        format!(
            "data:audio/wav;base64,{}",
            base64::engine::general_purpose::STANDARD.encode(bytes)
        )
    }

    fn audio(url: String) -> OutputItem {
        OutputItem::Audio(codemode_protocol::AudioItem { audio_url: url })
    }

    fn image() -> OutputItem {
        OutputItem::Image(codemode_protocol::ImageItem {
            image_url: "data:image/png;base64,AA==".into(),
            detail: Default::default(),
        })
    }

    #[test]
    fn audio_costs_ten_tokens_a_second_of_its_duration_or_its_size_when_unreadable() {
        assert_eq!(audio_tokens(&wav(1)), 10);
        assert_eq!(audio_tokens(&wav(3)), 30);
        // Not a container symphonia reads: its data URL's bytes / 4.
        let garbage = "data:audio/wav;base64,AAAAAAAA";
        assert_eq!(audio_tokens(garbage), (garbage.len() as u64).div_ceil(4));
        let unknown = "data:audio/flac;base64,AAAA";
        assert_eq!(audio_tokens(unknown), (unknown.len() as u64).div_ceil(4));
    }

    #[test]
    fn with_media_the_budget_is_spent_in_order_and_what_does_not_fit_is_counted() {
        let items = vec![
            OutputItem::text("a".repeat(100)),
            audio(wav(1)),
            image(),
            audio(wav(30)),
            OutputItem::text("b".repeat(200)),
            OutputItem::text("c".repeat(8)),
            image(),
            audio(wav(1)),
        ];
        let fitted = fit_output(items.clone(), 60);
        // 25 tokens of text, 10 of audio, the image free, 300 of audio left out, the rest of the
        // budget (25 tokens) for the cut text, nothing for the last text or audio.
        assert_eq!(fitted[..3], items[..3]);
        let OutputItem::Text { text: cut } = &fitted[3] else {
            panic!("{fitted:?}")
        };
        assert!(cut.starts_with(&"b".repeat(40)), "{cut}");
        assert!(!cut.contains(&"b".repeat(101)), "{cut}");
        assert!(!cut.contains("cccc"), "{cut}");
        // The second image is kept in its place; the counts close the output.
        assert_eq!(
            fitted[4..],
            [
                image(),
                OutputItem::text("[omitted 1 text items ...]\n[omitted 2 audio items ...]")
            ]
        );
        // Within the budget nothing changes but the joining of texts.
        assert_eq!(fit_output(items[..3].to_vec(), 60), items[..3]);
    }

    #[test]
    fn text_alone_is_joined_and_cut_in_the_middle() {
        let items = vec![
            OutputItem::text("x".repeat(400)),
            OutputItem::text("y".repeat(400)),
        ];
        let fitted = fit_output(items, 50);
        let texts: Vec<_> = fitted
            .iter()
            .map(|item| match item {
                OutputItem::Text { text } => text.as_str(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert!(texts[0].starts_with('x') && texts.last().unwrap().ends_with('y'));
        assert!(texts.iter().any(|text| text.contains("output truncated")));
    }
}
