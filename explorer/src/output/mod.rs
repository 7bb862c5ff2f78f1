//! Layer 4: outputs. The exploration's report and bug files (`report`),
//! the JSON documents and their schemas (`schema`), shards combined into
//! one exploration (`merge`). Files here may import every layer below;
//! nothing below imports them.

pub mod merge;
pub mod report;
pub mod schema;
