//! The items a cell emits for the model: text, images and audio (output and rendering).
//!
//! JSON shapes, tagged by `type`:
//! - `{"type": "text", "text": "..."}`
//! - `{"type": "image", "image_url": "data:image/png;base64,...", "detail": "high"}`
//! - `{"type": "audio", "audio_url": "data:audio/wav;base64,..."}`

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// One item of a cell's output, in the order the cell produced it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum OutputItem {
    /// Text from `text(...)`, or a notice the runtime inserted (such as an omission notice).
    Text {
        /// The text.
        text: String,
    },
    /// An image from `image(...)`.
    Image(ImageItem),
    /// Audio from `audio(...)`.
    Audio(AudioItem),
}

impl OutputItem {
    /// A text item.
    pub fn text(text: impl Into<String>) -> Self {
        OutputItem::Text { text: text.into() }
    }

    /// How many bytes this item's payload occupies: the text, or the length of the data URL.
    pub fn payload_len(&self) -> usize {
        match self {
            OutputItem::Text { text } => text.len(),
            OutputItem::Image(image) => image.image_url.len(),
            OutputItem::Audio(audio) => audio.audio_url.len(),
        }
    }
}

/// An image, always as a `data:` URL: the runtime never fetches remote content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageItem {
    /// A `data:<mime>;base64,<payload>` URL.
    pub image_url: String,
    /// How closely the model should look at the image.
    pub detail: ImageDetail,
}

/// Audio, always as a `data:` URL.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AudioItem {
    /// A `data:<mime>;base64,<payload>` URL.
    pub audio_url: String,
}

/// The key of an MCP image block's `_meta` that names the detail to show it at, as upstream code
/// mode has it: read from a downstream server's image block (`"original"` for an image whose
/// every pixel matters), and written on the image blocks `codemode mcp` answers with.
pub const MCP_IMAGE_DETAIL_META: &str = "codex/imageDetail";

/// How closely the model should look at an image. Parsed case-insensitively; `high` by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ImageDetail {
    /// The model chooses.
    Auto,
    /// A low-resolution view.
    Low,
    #[default]
    /// A high-resolution view (the default).
    High,
    /// The image as it is.
    Original,
}

impl ImageDetail {
    /// Every detail level, in the order they are listed to a user.
    pub const ALL: [ImageDetail; 4] = [
        ImageDetail::Auto,
        ImageDetail::Low,
        ImageDetail::High,
        ImageDetail::Original,
    ];

    /// The lowercase name used on the wire and in JavaScript.
    pub fn as_str(self) -> &'static str {
        match self {
            ImageDetail::Auto => "auto",
            ImageDetail::Low => "low",
            ImageDetail::High => "high",
            ImageDetail::Original => "original",
        }
    }
}

impl fmt::Display for ImageDetail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A detail level that is not one of auto, low, high or original.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid image detail \"{0}\": expected one of auto, low, high, original")]
pub struct ParseImageDetailError(pub String);

impl FromStr for ImageDetail {
    type Err = ParseImageDetailError;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        ImageDetail::ALL
            .into_iter()
            .find(|detail| detail.as_str().eq_ignore_ascii_case(value))
            .ok_or_else(|| ParseImageDetailError(value.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_items_have_stable_json_shapes() {
        let items = vec![
            OutputItem::text("hello"),
            OutputItem::Image(ImageItem {
                image_url: "data:image/png;base64,iVBORw0KGgo=".into(),
                detail: ImageDetail::Low,
            }),
            OutputItem::Audio(AudioItem {
                audio_url: "data:audio/wav;base64,UklGRg==".into(),
            }),
        ];
        insta::assert_json_snapshot!(items);
        let round_trip: Vec<OutputItem> =
            serde_json::from_value(serde_json::to_value(&items).unwrap()).unwrap();
        assert_eq!(round_trip, items);
    }

    #[test]
    fn image_detail_parses_case_insensitively_and_defaults_to_high() {
        assert_eq!("LOW".parse::<ImageDetail>(), Ok(ImageDetail::Low));
        assert_eq!("Original".parse::<ImageDetail>(), Ok(ImageDetail::Original));
        assert_eq!(ImageDetail::default(), ImageDetail::High);
        assert_eq!(
            "medium".parse::<ImageDetail>().unwrap_err().to_string(),
            "invalid image detail \"medium\": expected one of auto, low, high, original"
        );
    }
}
