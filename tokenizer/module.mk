# tokenizer/module.mk - GPT-2, Llama 2 and Llama 3 BPE (bpe*.c), BPE training (bpe_train.c), the `tok` program
# (tok*.c: encode/decode/shards/train), `make data` (GPT-2 shards; the bpe4k vocabulary learned from the corpus's
# training split, and its shards) and `make data-llama` (Llama 2 and Llama 3 shards), and the tokenizer tests.
# DATA (default `data`) is the data cache directory.
# BPE_SRC: the tokenizers (tokenizer/tokenizer.h); the fuzz harnesses (Makefile) compile them too
BPE_SRC := tokenizer/bpe.c tokenizer/bpe_load.c tokenizer/bpe_pretok.c tokenizer/bpe_encode.c
TOKENIZER_OBJ := $(BPE_SRC:%.c=$(BUILD)/%.o) $(BUILD)/tokenizer/bpe_train.o
TOK_SRC := tokenizer/tok.c tokenizer/tok_encode.c tokenizer/tok_decode.c tokenizer/tok_shards.c \
           tokenizer/tok_train.c tokenizer/tok_docs.c tokenizer/tok_jsonl.c tokenizer/tok_staging.c

tok: $(TOK_SRC:%.c=$(BUILD)/%.o) $(TOKENIZER_OBJ) $(BUILD)/dataloader/shard.o $(COMMON_OBJ)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS) $(PCRE2_LIBS) -lpthread

PROGRAMS += tok

# `make data`: fetch the vocabulary, test vectors and the default corpus, then shard the corpus (once; the
# stamp records that the shards are complete for these inputs and this tok).
SOTU_SHARDS := $(DATA)/sotu/gpt2/.stamp
BPE4K_SHARDS := $(DATA)/sotu/bpe4k/.stamp

# Two at once (two trainers started together on a fresh checkout each prepare the corpus on first use) must not
# race on the same files: each `make data` / `make data-llama` takes an exclusive lock on $(DATA)/.make-data.lock
# (flock(1), util-linux) and runs the real targets under it; the second waits and then finds them up to date.
.PHONY: data data-unlocked tokenizer bench-tokenizer
data:
	@mkdir -p $(DATA)
	@flock $(DATA)/.make-data.lock $(MAKE) --no-print-directory data-unlocked
data-unlocked: $(SOTU_SHARDS) $(BPE4K_SHARDS)

$(DATA)/gpt2/.fetched: scripts/fetch_data.sh
	scripts/fetch_data.sh $(DATA)
	@touch $@

$(SOTU_SHARDS): $(DATA)/gpt2/.fetched tok
	@rm -f $@
	./tok shards --data $(DATA) --out $(DATA)/sotu/gpt2 --name sotu --val-percent 5 $(DATA)/sotu/txt
	@touch $@

# bpe4k: 4096 tokens learned from the training documents (the same --val-percent as the shards, so the held-out
# documents stay unseen by the vocabulary too), then the corpus as uint16 shards (EOT 4095 before each document).
$(DATA)/bpe4k/.stamp: $(DATA)/gpt2/.fetched tok
	@rm -f $@
	./tok train --vocab 4096 --out $(DATA)/bpe4k --val-percent 5 $(DATA)/sotu/txt
	@touch $@

$(BPE4K_SHARDS): $(DATA)/bpe4k/.stamp tok
	@rm -f $@
	./tok shards --data $(DATA) --model bpe4k --out $(DATA)/sotu/bpe4k --name sotu --val-percent 5 $(DATA)/sotu/txt
	@touch $@

# `make data-llama`: the same corpus as uint32 shards for Llama 2 (<s> before each document) and Llama 3
# (<|begin_of_text|> before each document), in DATA/sotu/llama2/ and DATA/sotu/llama3/.
.PHONY: data-llama data-llama-unlocked
data-llama:
	@mkdir -p $(DATA)
	@flock $(DATA)/.make-data.lock $(MAKE) --no-print-directory data-llama-unlocked
data-llama-unlocked: $(DATA)/sotu/llama2/.stamp $(DATA)/sotu/llama3/.stamp

$(DATA)/sotu/llama%/.stamp: $(DATA)/gpt2/.fetched tok
	@rm -f $@
	./tok shards --data $(DATA) --model llama$* --out $(DATA)/sotu/llama$* --name sotu --val-percent 5 $(DATA)/sotu/txt
	@touch $@

$(BUILD)/test_tokenizer: test/test_tokenizer.c $(TOKENIZER_OBJ) $(COMMON_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS) $(PCRE2_LIBS) -lpthread

$(BUILD)/test_tokenizer_llama: test/test_tokenizer_llama.c $(TOKENIZER_OBJ) $(COMMON_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS) $(PCRE2_LIBS) -lpthread

tokenizer: tok $(BUILD)/test_tokenizer $(BUILD)/test_tokenizer_llama

bench-tokenizer: tok
	scripts/bench_tokenizer.sh $(DATA)

TEST_BINS += $(BUILD)/test_tokenizer $(BUILD)/test_tokenizer_llama
TEST_DEPS += data
TEST_CMDS += "$(BUILD)/test_tokenizer $(DATA)"
TEST_CMDS += "$(BUILD)/test_tokenizer $(DATA) --model bpe4k"
TEST_CMDS += "test/test_tokenizer_train.sh $(DATA)"
TEST_CMDS += "$(BUILD)/test_tokenizer_llama $(DATA)"
TEST_CMDS += "test/test_tokenizer_node.sh $(DATA)"
TEST_CMDS += "test/test_tokenizer_shards.sh $(DATA)"
