//! An object store that keeps what it writes, so the files a commit wrote can enter the hot
//! tier once the commit succeeds without being read back from object storage.
//!
//! One is made per commit and dropped with it. Whole puts and multipart uploads are both
//! kept (a multipart upload as its parts, in order, once it completes), up to a budget;
//! past the budget nothing more is kept and those files are simply not made hot. Every call
//! goes to the wrapped store first: a write that fails there is not kept.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions, Result, UploadPart,
};

/// What a [`WriteThrough`] kept, shared with its uploads.
#[derive(Debug)]
struct Kept {
    files: Mutex<HashMap<Path, Bytes>>,
    /// Bytes still allowed.
    budget: Mutex<u64>,
}

impl Kept {
    fn keep(&self, location: &Path, bytes: Bytes) {
        let mut budget = self.budget.lock().expect("write-through budget");
        if (bytes.len() as u64) > *budget {
            *budget = 0;
            return;
        }
        *budget -= bytes.len() as u64;
        self.files
            .lock()
            .expect("write-through files")
            .insert(location.clone(), bytes);
    }
}

fn joined(payload: &PutPayload) -> Bytes {
    let parts: Vec<&Bytes> = payload.iter().collect();
    match parts.as_slice() {
        [one] => (*one).clone(),
        _ => {
            let mut all = BytesMut::with_capacity(payload.content_length());
            for part in parts {
                all.extend_from_slice(part);
            }
            all.freeze()
        }
    }
}

/// An object store keeping the objects written through it (see the module doc).
pub struct WriteThrough {
    inner: Arc<dyn ObjectStore>,
    kept: Arc<Kept>,
}

impl WriteThrough {
    /// `inner`, keeping at most `budget` bytes of what is written through it.
    pub fn new(inner: Arc<dyn ObjectStore>, budget: u64) -> Self {
        Self {
            inner,
            kept: Arc::new(Kept {
                files: Mutex::new(HashMap::new()),
                budget: Mutex::new(budget),
            }),
        }
    }

    /// The whole object written at `location`, if it was kept.
    pub fn take(&self, location: &Path) -> Option<Bytes> {
        self.kept
            .files
            .lock()
            .expect("write-through files")
            .remove(location)
    }
}

impl fmt::Debug for WriteThrough {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "WriteThrough({})", self.inner)
    }
}

impl fmt::Display for WriteThrough {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "WriteThrough({})", self.inner)
    }
}

/// A multipart upload keeping its parts until it completes.
#[derive(Debug)]
struct KeptUpload {
    inner: Box<dyn MultipartUpload>,
    location: Path,
    parts: Option<Vec<Bytes>>,
    size: u64,
    kept: Arc<Kept>,
}

#[async_trait]
impl MultipartUpload for KeptUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        if let Some(parts) = self.parts.as_mut() {
            self.size += data.content_length() as u64;
            if self.size > *self.kept.budget.lock().expect("write-through budget") {
                self.parts = None;
            } else {
                parts.push(joined(&data));
            }
        }
        self.inner.put_part(data)
    }

    async fn complete(&mut self) -> Result<PutResult> {
        let result = self.inner.complete().await?;
        if let Some(parts) = self.parts.take() {
            let mut all = BytesMut::with_capacity(self.size as usize);
            for part in parts {
                all.extend_from_slice(&part);
            }
            self.kept.keep(&self.location, all.freeze());
        }
        Ok(result)
    }

    async fn abort(&mut self) -> Result<()> {
        self.parts = None;
        self.inner.abort().await
    }
}

#[async_trait]
impl ObjectStore for WriteThrough {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        let bytes = joined(&payload);
        let result = self.inner.put_opts(location, payload, opts).await?;
        self.kept.keep(location, bytes);
        Ok(result)
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        let inner = self.inner.put_multipart_opts(location, opts).await?;
        Ok(Box::new(KeptUpload {
            inner,
            location: location.clone(),
            parts: Some(Vec::new()),
            size: 0,
            kept: self.kept.clone(),
        }))
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        self.inner.get_opts(location, options).await
    }

    async fn get_ranges(
        &self,
        location: &Path,
        ranges: &[std::ops::Range<u64>],
    ) -> Result<Vec<Bytes>> {
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        self.inner.rename_opts(from, to, options).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::ObjectStoreExt;
    use object_store::memory::InMemory;

    #[tokio::test]
    async fn puts_and_uploads_are_kept_within_the_budget() {
        let store = WriteThrough::new(Arc::new(InMemory::new()), 100);
        let (a, b, c) = (Path::from("a"), Path::from("b"), Path::from("c"));
        store
            .put(&a, PutPayload::from(vec![1u8; 40]))
            .await
            .unwrap();
        let mut upload = store.put_multipart(&b).await.unwrap();
        upload
            .put_part(PutPayload::from(vec![2u8; 20]))
            .await
            .unwrap();
        upload
            .put_part(PutPayload::from(vec![3u8; 20]))
            .await
            .unwrap();
        upload.complete().await.unwrap();
        // Past what is left of the budget: written, not kept.
        store
            .put(&c, PutPayload::from(vec![4u8; 30]))
            .await
            .unwrap();
        assert_eq!(store.take(&a).unwrap().len(), 40);
        let both = store.take(&b).unwrap();
        assert_eq!((&both[..20], &both[20..]), (&[2u8; 20][..], &[3u8; 20][..]));
        assert!(store.take(&c).is_none());
        assert_eq!(
            store.get(&c).await.unwrap().bytes().await.unwrap().len(),
            30
        );
    }
}
