// test_megatron_parse — the parser's pieces that need no training run:
//   1. Python digit grouping: accepted and refused forms, against Python's rule written out here.
//   2. The @file lexer on shell quoting cases, each against the words bash produces for the same text
//      (checked with bash 5: eval "set -- $text"), except where keel means to differ: a newline
//      without a backslash does not end the list (the file is one argument list, so words after a
//      comment line still count) and a carriage return is whitespace (files saved with CRLF).
//   3. The DeepSpeed JSON → Config mapping for what test_megatron_flags.sh does not train: the
//      curriculum's fixed_root and fixed_discrete forms, bf16, DeepSpeed's defaults for absent fp16
//      keys (2^16, window 1000, hysteresis 2, min 1) and absent gradient_clipping (0).
// Failures (exit 2 paths) are covered by test_megatron_flags.sh, which runs the trainer.
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "llmc/flags.h"

static int failures = 0;
static void check(const std::string& what, bool ok, const std::string& detail = "") {
    printf("%s: %s%s%s\n", ok ? "ok" : "FAIL", what.c_str(), ok || detail.empty() ? "" : " — ", ok ? "" : detail.c_str());
    failures += !ok;
}

static std::vector<std::string> tmp_files;  // removed at the end

static std::string write_tmp(const std::string& name, const std::string& text) {
    std::string path = "/tmp/keel_test_megatron_parse_" + std::to_string(getpid()) + "_" + name;
    tmp_files.push_back(path);
    FILE* f = fopen(path.c_str(), "wb");
    fwrite(text.data(), 1, text.size(), f);
    fclose(f);
    return path;
}

static std::string joined(const std::vector<std::string>& w) {
    std::string s;
    for (const std::string& x : w) s += "[" + x + "]";
    return s;
}

static Config parse(std::vector<std::string> args) {
    std::vector<char*> argv = {(char*)"keel"};
    for (std::string& a : args) argv.push_back(&a[0]);
    Config c;
    flags_parse(&c, (int)argv.size(), argv.data());
    return c;
}

int main() {
    // 1. digit grouping: an underscore only between two digits (Python's int() and float())
    struct { const char* in; bool ok; const char* out; } groups[] = {
        {"126_953_125", true, "126953125"}, {"1_0e-3", true, "10e-3"}, {"6e1_0", true, "6e10"}, {"1.0_5", true, "1.05"},
        {"1__0", false, ""}, {"_1", false, ""}, {"1_", false, ""}, {"1_.5", false, ""}, {"1._5", false, ""}, {"1e_5", false, ""},
    };
    for (auto& g : groups) {
        std::string out;
        bool ok = flag_strip_digit_underscores(g.in, &out);
        check(std::string("digits '") + g.in + "'", ok == g.ok && (!ok || out == g.out), ok ? out : "refused");
    }
    // 2. the lexer: text → words, as bash splits them
    struct { const char* text; std::vector<std::string> words; } lex[] = {
        {"--a 1 \\\n  --b 2\n", {"--a", "1", "--b", "2"}},
        {"--p 'x y' \"u v\" w\\ z\n", {"--p", "x y", "u v", "w z"}},
        {"--q \"a'b\" 'c\"d' \"e\\\"f\" \"g\\\\h\" \"i\\j\"\n", {"--q", "a'b", "c\"d", "e\"f", "g\\h", "i\\j"}},
        {"--r a#b # comment\n# whole line\n--s '#x'\n", {"--r", "a#b", "--s", "#x"}},
        {"--t '$HOME' \"\\$HOME\" \\$HOME\n", {"--t", "$HOME", "$HOME", "$HOME"}},
        {"--u \"multi\\\nline\" 'keep\nnewline'\n", {"--u", "multiline", "keep\nnewline"}},
        {"--v ''x\"\"y\n", {"--v", "xy"}},
        {"   \n\t--w=3\r\n", {"--w=3"}},
    };
    for (size_t i = 0; i < sizeof lex / sizeof lex[0]; i++) {
        std::vector<std::string> got;
        flags_read_file(write_tmp("lex" + std::to_string(i), lex[i].text).c_str(), &got, 0);
        check("lexer case " + std::to_string(i), got == lex[i].words, joined(got) + " vs " + joined(lex[i].words));
    }
    // 3. DeepSpeed mapping
    const std::vector<std::string> base = {"--lr", "1e-3", "--train-iters", "3", "--train-data-path", "x.bin", "--deepspeed", "--deepspeed_config"};
    auto with = [&](const std::string& name, const std::string& json) {
        std::vector<std::string> a = base;
        a.push_back(write_tmp(name, json));
        return parse(a);
    };
    Config r = with("root.json", R"({"curriculum_learning": {"enabled": true, "curriculum_type": "seqlen", "min_difficulty": 64,
        "max_difficulty": 2048, "schedule_type": "fixed_root", "schedule_config": {"total_curriculum_step": 36000, "difficulty_step": 8,
        "root_degree": 2}}, "bf16": {"enabled": true}})");
    check("fixed_root → --cl-* flags", r.curriculum_learning && r.cl_schedule == "fixed_root" && r.cl_min_seqlen == 64 &&
          r.cl_max_seqlen == 2048 && r.cl_total_steps == 36000 && r.cl_difficulty_step == 8 && r.cl_root_degree == 2.0);
    check("bf16.enabled → --bf16, no clipping without gradient_clipping", r.bf16 && !r.fp16 && !r.fp32 && r.clip_grad == 0.0);
    Config d = with("disc.json", R"({"curriculum_learning": {"enabled": true, "curriculum_type": "seqlen", "min_difficulty": 1,
        "max_difficulty": 3, "schedule_type": "fixed_discrete", "schedule_config": {"difficulty": [8, 12, 16], "max_step": [5, 10]}}})");
    check("fixed_discrete → --cl-discrete-seqlens/steps", d.cl_schedule == "fixed_discrete" && d.cl_discrete_seqlens == "8 12 16" &&
          d.cl_discrete_steps == "5 10", d.cl_discrete_seqlens + " / " + d.cl_discrete_steps);
    check("neither fp16 nor bf16 → fp32", d.fp32 && !d.fp16 && !d.bf16);
    Config f = with("fp16.json", R"({"fp16": {"enabled": true}, "gradient_clipping": 1.0})");
    check("fp16 defaults: dynamic, 2^16, window 1000, hysteresis 2, min 1", f.fp16 && f.loss_scale == 0 && f.initial_loss_scale == 65536.0 &&
          f.loss_scale_window == 1000 && f.hysteresis == 2 && f.min_loss_scale == 1.0 && f.clip_grad == 1.0);
    Config s = with("static.json", R"({"fp16": {"enabled": true, "loss_scale": 128}})");
    check("fp16.loss_scale 128 → a static scale", s.loss_scale == 128.0);
    Config off = with("cloff.json", R"({"curriculum_learning": {"enabled": false, "min_difficulty": 8}})");
    check("curriculum_learning.enabled false → no curriculum", !off.curriculum_learning && off.cl_min_seqlen == 0);
    for (const std::string& p : tmp_files) unlink(p.c_str());
    printf(failures ? "FAIL (%d)\n" : "PASS\n", failures);
    return failures ? 1 : 0;
}
