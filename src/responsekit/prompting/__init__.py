"""What an engine that takes raw text needs: the chat template rendered, the stop texts, the grammar
that constrains calls and JSON, and the call syntax derived from a template no format knows."""
