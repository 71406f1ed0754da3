"""Figure and table builders, one module per page (arrays in, go.Figure / DataFrame out; no streamlit calls)."""
