"""Google's Gemini API (`/v1beta/models/{model}:generateContent` and its kin)."""
