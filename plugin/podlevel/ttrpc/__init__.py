"""NRI's wire layers below the NRI messages: `mux` (conns on one socket), `codec` (unary ttrpc, sans I/O),
`transport` (both run over an asyncio unix socket); `_buffer` splits records for both mux and codec. Nothing
here knows NRI's services or messages."""
