"""The bottom layer: argument checks and run options; imports nothing else of attntemp."""
