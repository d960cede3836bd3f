//! Output collection between two observations, in the two output modes.
//!
//! Both modes bound the bytes of output of every kind the actor buffers (client mode for the whole
//! cell, server mode between two observations): items past the output budget are dropped and
//! counted, and an omission entry stands where they were, in order. Server mode also has a tighter
//! budget for images.
//! (The other server-mode bound, the event queue with back-pressure, is the engine's event
//! channel.) Everything an observation takes can be put back exactly, if its delivery fails.

use codemode_protocol::OutputItem;
use codemode_protocol::limits::{
    BOUNDED_EVENT_QUEUE_CAPACITY, BOUNDED_OUTPUT_MAX_BYTES, BOUNDED_OUTPUT_MAX_IMAGE_BYTES,
    MAX_BUFFERED_OUTPUT_BYTES,
};

/// How much output the runtime buffers for a cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputMode {
    /// Keep everything up to [`MAX_BUFFERED_OUTPUT_BYTES`]; truncation happens when rendering.
    Client,
    /// Bound what is buffered.
    Server {
        /// Engine events that may wait for the actor before the engine thread blocks.
        event_queue_capacity: usize,
        /// Image-URL bytes buffered between two observations; images past it are omitted.
        image_budget_bytes: usize,
        /// Output bytes of every kind buffered between two observations; items past it are
        /// omitted.
        output_budget_bytes: usize,
    },
}

impl OutputMode {
    /// Server mode with the default bounds of `codemode_protocol::limits`.
    pub fn server() -> Self {
        OutputMode::Server {
            event_queue_capacity: BOUNDED_EVENT_QUEUE_CAPACITY,
            image_budget_bytes: BOUNDED_OUTPUT_MAX_IMAGE_BYTES,
            output_budget_bytes: BOUNDED_OUTPUT_MAX_BYTES,
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

/// One entry of collected output: an item, or a run of items dropped for a budget.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum OutputEntry {
    /// An item the cell emitted.
    Item(OutputItem),
    /// This many images, dropped for the image budget.
    ImagesOmitted(usize),
    /// Items of any kind dropped for the output budget.
    Omitted {
        /// How many items.
        items: usize,
        /// Their payload bytes.
        bytes: usize,
    },
}

/// The output an observation hands out, in production order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CollectedOutput {
    entries: Vec<OutputEntry>,
    /// Image bytes these entries hold, counted against the server-mode budget.
    image_bytes: usize,
    /// Payload bytes these entries hold, counted against the output budget.
    bytes: usize,
}

/// The text that stands where images were omitted.
fn omission_notice(images: usize) -> String {
    format!("[{images} images omitted: image output budget exceeded]")
}

/// The text that stands where items were omitted for the output budget.
fn output_omission_notice(items: usize, bytes: usize) -> String {
    format!("[{items} output items omitted ({bytes} bytes): output budget exceeded]")
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
                OutputEntry::Item(_) | OutputEntry::Omitted { .. } => 0,
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
                OutputEntry::Omitted { items, bytes } => {
                    OutputItem::text(output_omission_notice(items, bytes))
                }
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
    /// Client mode: payload bytes already taken, which still count (its budget is for the
    /// whole cell).
    taken_bytes: usize,
    /// Every item pushed over the cell's life and its payload bytes, budgets aside.
    emitted: (u64, u64),
}

impl OutputCollector {
    pub fn new(mode: OutputMode) -> Self {
        OutputCollector {
            mode,
            buffered: CollectedOutput::default(),
            taken_bytes: 0,
            emitted: (0, 0),
        }
    }

    pub fn push(&mut self, item: OutputItem) {
        let (image_budget, output_budget) = match self.mode {
            OutputMode::Client => (None, MAX_BUFFERED_OUTPUT_BYTES),
            OutputMode::Server {
                image_budget_bytes,
                output_budget_bytes,
                ..
            } => (Some(image_budget_bytes), output_budget_bytes),
        };
        let entries = &mut self.buffered.entries;
        let bytes = item.payload_len();
        self.emitted.0 += 1;
        self.emitted.1 = self.emitted.1.saturating_add(bytes as u64);
        let spent = self.buffered.bytes.saturating_add(self.taken_bytes);
        if spent.saturating_add(bytes) > output_budget {
            match entries.last_mut() {
                Some(OutputEntry::Omitted {
                    items,
                    bytes: omitted,
                }) => {
                    *items += 1;
                    *omitted = omitted.saturating_add(bytes);
                }
                _ => entries.push(OutputEntry::Omitted { items: 1, bytes }),
            }
            return;
        }
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
        self.buffered.bytes += bytes;
        entries.push(OutputEntry::Item(item));
    }

    /// Items pushed over the cell's life and their payload bytes, including any left out.
    pub fn emitted(&self) -> (u64, u64) {
        self.emitted
    }

    /// Takes everything buffered; in server mode the budgets start afresh, in client mode the
    /// output budget goes on counting what was taken.
    pub fn take(&mut self) -> CollectedOutput {
        let taken = std::mem::take(&mut self.buffered);
        if self.mode == OutputMode::Client {
            self.taken_bytes = self.taken_bytes.saturating_add(taken.bytes);
        }
        taken
    }

    /// Puts back output whose delivery failed, in front of anything buffered since, with its
    /// budget use: after `take` then `restore` the collector is exactly as before.
    pub fn restore(&mut self, mut undelivered: CollectedOutput) {
        if self.mode == OutputMode::Client {
            self.taken_bytes = self.taken_bytes.saturating_sub(undelivered.bytes);
        }
        let later = std::mem::take(&mut self.buffered);
        let mut later_entries = later.entries.into_iter();
        match (
            undelivered.entries.last_mut(),
            later_entries.as_slice().first(),
        ) {
            (Some(OutputEntry::ImagesOmitted(front)), Some(OutputEntry::ImagesOmitted(back))) => {
                *front += back;
                later_entries.next();
            }
            (
                Some(OutputEntry::Omitted { items, bytes }),
                Some(OutputEntry::Omitted {
                    items: more_items,
                    bytes: more_bytes,
                }),
            ) => {
                *items += more_items;
                *bytes = bytes.saturating_add(*more_bytes);
                later_entries.next();
            }
            _ => {}
        }
        undelivered.entries.extend(later_entries);
        undelivered.image_bytes += later.image_bytes;
        undelivered.bytes += later.bytes;
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
            output_budget_bytes: 1 << 20,
        })
    }

    #[test]
    fn text_past_the_output_budget_is_omitted_and_counted_where_it_stood() {
        let mut output = OutputCollector::new(OutputMode::Server {
            event_queue_capacity: 4,
            image_budget_bytes: 100,
            output_budget_bytes: 10,
        });
        output.push(OutputItem::text("12345678"));
        output.push(OutputItem::text("abc"));
        output.push(OutputItem::text("defg"));
        output.push(OutputItem::text("hi"));
        output.push(image("xxxxxxxxxxxx"));
        let items = output.take().into_items();
        assert_eq!(
            items,
            [
                OutputItem::text("12345678"),
                OutputItem::text("[2 output items omitted (7 bytes): output budget exceeded]"),
                OutputItem::text("hi"),
                OutputItem::text("[1 output items omitted (12 bytes): output budget exceeded]"),
            ]
        );
    }

    #[test]
    fn client_mode_bounds_the_whole_cell_by_the_output_budget() {
        let mut output = OutputCollector::new(OutputMode::Client);
        let megabyte = "x".repeat(1 << 20);
        output.push(OutputItem::text(megabyte.clone()));
        // What was taken still counts: the budget is for the whole cell.
        let first = output.take();
        assert_eq!(first.entries().len(), 1);
        for _ in 1..100 {
            output.push(OutputItem::text(megabyte.clone()));
        }
        let collected = output.take();
        let kept = (MAX_BUFFERED_OUTPUT_BYTES >> 20) - 1;
        assert_eq!(collected.entries().len(), kept + 1);
        assert_eq!(
            collected.entries().last(),
            Some(&OutputEntry::Omitted {
                items: 99 - kept,
                bytes: (99 - kept) << 20
            })
        );
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
