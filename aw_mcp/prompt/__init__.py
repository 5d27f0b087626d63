"""How a world becomes the model's conversation and how an answer is read back: rendering, templates, the answer's
frame, the per-session transcript, the context budget, the answer parser, the grammar an answer must follow."""
