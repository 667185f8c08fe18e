# dataloader/module.mk - token shards (shard.c: format, writer, lists) and the training/validation loaders.
# Other components link $(DATALOADER_OBJ); build/dataloader/shard.o alone is enough for writing shards.
DATALOADER_OBJ := $(BUILD)/dataloader/shard.o $(BUILD)/dataloader/dataloader.o

.PHONY: dataloader
dataloader: $(DATALOADER_OBJ) $(BUILD)/test_dataloader

$(BUILD)/test_dataloader: test/test_dataloader.c $(DATALOADER_OBJ) $(COMMON_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS) -lpthread

TEST_BINS += $(BUILD)/test_dataloader
TEST_CMDS += $(BUILD)/test_dataloader

# throughput measurement, not part of `make test`: make bench-dataloader
$(BUILD)/bench_dataloader: $(BUILD)/dataloader/bench_dataloader.o $(DATALOADER_OBJ) $(COMMON_OBJ)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

.PHONY: bench-dataloader
bench-dataloader: $(BUILD)/bench_dataloader
	$(BUILD)/bench_dataloader --make $(BUILD)/bench_shard.bin --tokens 50000000 --batches 5000 --shuffle 1
	$(BUILD)/bench_dataloader --data $(BUILD)/bench_shard.bin --batches 5000 --shuffle 0
	rm -f $(BUILD)/bench_shard.bin
