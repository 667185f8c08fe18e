# eval/module.mk - downstream tasks scored on the models' forward pass (issue 32): the task files' readers
# (eval/tasks.c, JSON through jansson) and the scorer (eval/evaluate.c), linked into every trainer through
# $(TRAIN_LINK_OBJ) and $(TRAIN_LIBS) (trainer/module.mk), and their tests.
EVAL_OBJ := $(BUILD)/eval/tasks.o $(BUILD)/eval/evaluate.o
JANSSON_LIBS := -ljansson

# readers on the hand-written items of test/eval/ (every format, every malformed case) and the scorer on a model
# whose log-probabilities the test computes itself
$(BUILD)/test_eval: $(BUILD)/test/test_eval.o $(EVAL_OBJ) $$(TOKENIZER_OBJ) $(COMMON_OBJ)
	$(CC) $(CFLAGS) $^ -o $@ $(JANSSON_LIBS) $(PCRE2_LIBS) $(LDLIBS) -lpthread
TEST_BINS += $(BUILD)/test_eval
TEST_DEPS += data train_gpt
TEST_CMDS += "$(BUILD)/test_eval $(DATA)"
TEST_CMDS += "test/test_eval_train.sh ./train_gpt $(DATA)"
