"""What people look at: the report's figures and HTML, the sweep/tuning report, the reference
tables and the demo. Imports every layer below it except ``commands``."""
