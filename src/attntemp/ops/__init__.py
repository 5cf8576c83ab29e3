"""Pure math on tensors and plain numbers: tempered softmax and entropy, temperature schedules,
RoPE scaling, the q-fold with its materialised reference, blockwise attention statistics, 1-D
search and the TemperatureSpec. Imports only ``attntemp.utils``; knows nothing of transformers."""
