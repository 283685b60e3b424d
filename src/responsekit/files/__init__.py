"""Files and vector stores: blob storage, text extraction, chunking, embeddings, the hybrid search index."""
