//! Output collection between two observations, in the two output modes.
//!
//! *Client* mode keeps every item. *Server* mode bounds what the actor buffers: images beyond the
//! byte budget are dropped and counted, and an omission entry stands where they were, in order.
//! (The other server-mode bound, the event queue with back-pressure, is the engine's event
//! channel.) Everything an observation takes can be put back exactly, if its delivery fails.

use codemode_protocol::OutputItem;
use codemode_protocol::limits::{BOUNDED_EVENT_QUEUE_CAPACITY, BOUNDED_OUTPUT_MAX_IMAGE_BYTES};

/// How much output the runtime buffers for a cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputMode {
    /// Keep everything; truncation happens when rendering.
    Client,
    /// Bound what is buffered.
    Server {
        /// Engine events that may wait for the actor before the engine thread blocks.
        event_queue_capacity: usize,
        /// Image-URL bytes buffered between two observations; images past it are omitted.
        image_budget_bytes: usize,
    },
}

impl OutputMode {
    /// Server mode with the default bounds of `codemode_protocol::limits`.
    pub fn server() -> Self {
        OutputMode::Server {
            event_queue_capacity: BOUNDED_EVENT_QUEUE_CAPACITY,
            image_budget_bytes: BOUNDED_OUTPUT_MAX_IMAGE_BYTES,
        }
    }

    /// The capacity of the engine's event channel: `None` for unbounded.
    pub fn event_queue_capacity(self) -> Option<usize> {
        match self {
            OutputMode::Client => None,
            OutputMode::Server {
                event_queue_capacity,
                ..
            } => Some(event_queue_capacity),
        }
    }
}

/// One entry of collected output: an item, or a run of images dropped for the budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutputEntry {
    /// An item the cell emitted.
    Item(OutputItem),
    /// This many images, dropped for the image budget.
    ImagesOmitted(usize),
}

/// The output an observation hands out, in production order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CollectedOutput {
    entries: Vec<OutputEntry>,
    /// Image bytes these entries hold, counted against the server-mode budget.
    image_bytes: usize,
}

/// The text that stands where images were omitted.
fn omission_notice(images: usize) -> String {
    format!("[{images} images omitted: image output budget exceeded]")
}

impl CollectedOutput {
    /// The entries, in production order.
    pub fn entries(&self) -> &[OutputEntry] {
        &self.entries
    }

    /// Whether there is nothing.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// How many images were omitted in all.
    pub fn omitted_images(&self) -> usize {
        self.entries
            .iter()
            .map(|entry| match entry {
                OutputEntry::ImagesOmitted(count) => *count,
                OutputEntry::Item(_) => 0,
            })
            .sum()
    }

    /// The items for the model, with each omission as its notice text.
    pub fn into_items(self) -> Vec<OutputItem> {
        self.entries
            .into_iter()
            .map(|entry| match entry {
                OutputEntry::Item(item) => item,
                OutputEntry::ImagesOmitted(count) => OutputItem::text(omission_notice(count)),
            })
            .collect()
    }

    /// A client-mode collection of exactly these items.
    pub fn from_items(items: impl IntoIterator<Item = OutputItem>) -> Self {
        let mut collector = OutputCollector::new(OutputMode::Client);
        items.into_iter().for_each(|item| collector.push(item));
        collector.take()
    }
}

/// What the actor buffers between two observations.
#[derive(Debug)]
pub(crate) struct OutputCollector {
    mode: OutputMode,
    buffered: CollectedOutput,
}

impl OutputCollector {
    pub fn new(mode: OutputMode) -> Self {
        OutputCollector {
            mode,
            buffered: CollectedOutput::default(),
        }
    }

    pub fn push(&mut self, item: OutputItem) {
        let image_budget = match self.mode {
            OutputMode::Client => None,
            OutputMode::Server {
                image_budget_bytes, ..
            } => Some(image_budget_bytes),
        };
        let entries = &mut self.buffered.entries;
        if let (Some(budget), OutputItem::Image(image)) = (image_budget, &item) {
            let bytes = image.image_url.len();
            if self.buffered.image_bytes.saturating_add(bytes) > budget {
                match entries.last_mut() {
                    Some(OutputEntry::ImagesOmitted(count)) => *count += 1,
                    _ => entries.push(OutputEntry::ImagesOmitted(1)),
                }
                return;
            }
            self.buffered.image_bytes += bytes;
        }
        entries.push(OutputEntry::Item(item));
    }

    /// Takes everything buffered; the budget starts afresh.
    pub fn take(&mut self) -> CollectedOutput {
        std::mem::take(&mut self.buffered)
    }

    /// Puts back output whose delivery failed, in front of anything buffered since, with its
    /// budget use: after `take` then `restore` the collector is exactly as before.
    pub fn restore(&mut self, mut undelivered: CollectedOutput) {
        let later = std::mem::take(&mut self.buffered);
        let mut later_entries = later.entries.into_iter();
        if let (Some(OutputEntry::ImagesOmitted(front)), Some(OutputEntry::ImagesOmitted(back))) = (
            undelivered.entries.last_mut(),
            later_entries.as_slice().first(),
        ) {
            *front += back;
            later_entries.next();
        }
        undelivered.entries.extend(later_entries);
        undelivered.image_bytes += later.image_bytes;
        self.buffered = undelivered;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use codemode_protocol::{ImageDetail, ImageItem};

    fn image(url: &str) -> OutputItem {
        OutputItem::Image(ImageItem {
            image_url: url.into(),
            detail: ImageDetail::High,
        })
    }

    fn server(budget: usize) -> OutputCollector {
        OutputCollector::new(OutputMode::Server {
            event_queue_capacity: 4,
            image_budget_bytes: budget,
        })
    }

    #[test]
    fn client_mode_keeps_every_image() {
        let mut output = OutputCollector::new(OutputMode::Client);
        for _ in 0..3 {
            output.push(image(&"i".repeat(1000)));
        }
        assert_eq!(output.take().entries().len(), 3);
    }

    #[test]
    fn server_mode_omits_images_past_the_budget_where_they_stood() {
        let mut output = server(10);
        output.push(image("aaaaaaaaaa"));
        output.push(image("b"));
        output.push(image("c"));
        output.push(OutputItem::text("between"));
        output.push(image("d"));
        let items = output.take().into_items();
        assert_eq!(
            items,
            [
                image("aaaaaaaaaa"),
                OutputItem::text("[2 images omitted: image output budget exceeded]"),
                OutputItem::text("between"),
                OutputItem::text("[1 images omitted: image output budget exceeded]"),
            ]
        );
        // The budget starts afresh after a take.
        output.push(image("e"));
        assert_eq!(output.take().into_items(), [image("e")]);
    }

    #[test]
    fn a_failed_delivery_restores_items_budget_and_order_exactly() {
        let budget_image = "i".repeat(16);
        let mut output = server(16);
        output.push(image(&budget_image));
        output.push(image("excess"));
        let undelivered = output.take();
        output.restore(undelivered);
        // The budget is still used: another image is omitted, next to the first omission.
        output.push(image("more"));
        output.push(OutputItem::text("after"));
        let collected = output.take();
        assert_eq!(collected.omitted_images(), 2);
        assert_eq!(
            collected.into_items(),
            [
                image(&budget_image),
                OutputItem::text("[2 images omitted: image output budget exceeded]"),
                OutputItem::text("after"),
            ]
        );
        assert!(output.take().is_empty());
    }

    #[test]
    fn restored_output_goes_in_front_of_output_buffered_since() {
        let mut output = OutputCollector::new(OutputMode::Client);
        output.push(OutputItem::text("first"));
        let undelivered = output.take();
        output.push(OutputItem::text("second"));
        output.restore(undelivered);
        assert_eq!(
            output.take().into_items(),
            [OutputItem::text("first"), OutputItem::text("second")]
        );
    }
}
