//! A model-facing result as an MCP tool result: text as text blocks, images and audio as theirs.

use codemode_protocol::OutputItem;
use codemode_session::ToolResult;
use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::Value;

/// A model-facing result as an MCP tool result: text as text blocks, images and audio as theirs.
pub(super) fn to_call_tool_result(result: ToolResult) -> CallToolResult {
    let content: Vec<ContentBlock> = result
        .items
        .into_iter()
        .map(|item| match item {
            OutputItem::Text { text } => ContentBlock::text(text),
            OutputItem::Image(image) => match split_data_url(&image.image_url) {
                // The detail the cell gave travels with the block, as upstream's does.
                Some((mime, data)) => {
                    let mut meta = rmcp::model::MetaObject::new();
                    meta.0.insert(
                        codemode_protocol::MCP_IMAGE_DETAIL_META.to_owned(),
                        Value::String(image.detail.as_str().to_owned()),
                    );
                    ContentBlock::Image(rmcp::model::ImageContent::new(data, mime).with_meta(meta))
                }
                None => ContentBlock::text(format!(
                    "[image that is not a base64 data URL: {} bytes]",
                    image.image_url.len()
                )),
            },
            OutputItem::Audio(audio) => match split_data_url(&audio.audio_url) {
                Some((mime, data)) => ContentBlock::audio(data, mime),
                None => ContentBlock::text(format!(
                    "[audio that is not a base64 data URL: {} bytes]",
                    audio.audio_url.len()
                )),
            },
        })
        .collect();
    if result.is_error {
        CallToolResult::error(content)
    } else {
        CallToolResult::success(content)
    }
}

/// `data:<mime>;base64,<data>` as (mime, data).
fn split_data_url(url: &str) -> Option<(String, String)> {
    let rest = url
        .get(..5)
        .filter(|scheme| scheme.eq_ignore_ascii_case("data:"))
        .map(|_| &url[5..])?;
    let (header, data) = rest.split_once(',')?;
    let mime = header.strip_suffix(";base64")?;
    Some((mime.to_owned(), data.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_urls_split_into_mime_and_data() {
        assert_eq!(
            split_data_url("data:image/png;base64,AAA="),
            Some(("image/png".into(), "AAA=".into()))
        );
        assert_eq!(
            split_data_url("DATA:audio/wav;base64,UklG"),
            Some(("audio/wav".into(), "UklG".into()))
        );
        assert_eq!(split_data_url("data:text/plain,hello"), None);
        assert_eq!(split_data_url("https://x"), None);
    }
}
