"""Megatron-LM's tools/preprocess_data.py in a few lines of Python, the reference the preprocess
tests compare trident's .bin/.idx with, byte for byte:

    docs = megatron_encode(json_lines, keys, tokenize, eod, append_eod)
    bin_bytes, idx_bytes = megatron_files(docs, key, vocab_size)

tokenize is the Megatron tokenizer's tokenize(text) -> ids."""
import json
import struct


def megatron_encode(lines, keys, tokenize, eod, append_eod):
    """tools/preprocess_data.py's Encoder.encode over every line."""
    docs = []
    for line in lines:
        data = json.loads(line)
        ids, lens = {}, {}
        for key in keys:
            text = data[key]
            sentences = text if isinstance(text, list) else [text]
            doc_ids, sentence_lens = [], []
            for sentence in sentences:
                sentence_ids = tokenize(sentence)
                if len(sentence_ids) > 0:
                    doc_ids.extend(sentence_ids)
                    sentence_lens.append(len(sentence_ids))
            if len(doc_ids) > 0 and append_eod:
                doc_ids.append(eod)
                sentence_lens[-1] += 1
            ids[key], lens[key] = doc_ids, sentence_lens
        docs.append((ids, lens))
    return docs


def megatron_files(docs, key, vocab_size):
    """IndexedDatasetBuilder.add_document for each document, then finalize: (bin, idx) bytes."""
    code, fmt, itemsize = (8, "H", 2) if vocab_size < 65500 else (4, "i", 4)  # DType.optimal_dtype
    data, sequence_lengths, document_indices = bytearray(), [], [0]
    for ids, lens in docs:
        data += struct.pack("<%d%s" % (len(ids[key]), fmt), *ids[key])
        sequence_lengths.extend(lens[key])
        document_indices.append(len(sequence_lengths))
    pointers, cur = [], 0
    for length in sequence_lengths:
        pointers.append(cur)
        cur += length * itemsize
    idx = (b"MMIDIDX\x00\x00" + struct.pack("<Q", 1) + struct.pack("<B", code)
           + struct.pack("<Q", len(sequence_lengths)) + struct.pack("<Q", len(document_indices))
           + struct.pack("<%di" % len(sequence_lengths), *sequence_lengths)
           + struct.pack("<%dq" % len(pointers), *pointers)
           + struct.pack("<%dq" % len(document_indices), *document_indices))
    return bytes(data), idx
