// registers.h — the launch check a CPU cannot derive: registers per thread × threads per block.
// Included by emu_core.h (it uses its die()); docs/emulator.md, "Launch and library checks".
//
// A GPU refuses a launch ("too many resources requested for launch") whose block needs more
// registers than an SM gives one block — 65536 32-bit registers on sm_80 and sm_90, allocated per
// warp in units of 256, i.e. a thread's count rounded up to a multiple of 8 — or that has more
// threads than the kernel's __launch_bounds__. The counts are ptxas's, so they come from a table:
// kernel_registers.h, written by `make kernel-registers` from scripts/ptxas_report.sh and kept
// current by test_ptxas. A launch is checked against the architecture that allocates the kernel the
// most registers, so a launch that passes here fits on both.
//
// The key is the kernel's name as c++filt prints ptxas's entry, less the return type and the
// parameters, "> >" written ">>": "keel_cuda::layernorm_backward_kernel<__half>". kernel_key<K>()
// makes the same string from g++'s mangling of KernelTag<K> (K: the kernel's address), so the
// template arguments are the launched instantiation's, spelled by a demangler as c++filt spells them
// (the launch's source text, "layernorm_backward_kernel<F>", would not name them); an overloaded
// kernel name would share one row (the largest count). KEEL_EMU_REGISTERS:
//   (unset)  a keel_cuda:: kernel missing from the table (added since the table was made) is named
//            once on stderr and not checked; other kernels (a test's own) are not checked unless the
//            test adds a row (kernel_registers_add)
//   strict   a keel_cuda:: kernel missing from the table is refused
//   report   as unset, and at exit one line per checked kernel: its largest block's registers
//            against the 65536, the fullest first
#pragma once
#include <cxxabi.h>

#include <algorithm>
#include <set>
#include <typeinfo>

namespace emu {

struct KernelRegisters {
    int arch;         // 80: sm_80
    int regs;         // per thread, as ptxas reports them
    int max_threads;  // __launch_bounds__'s first argument; 0: none
    const char* kernel;
};
inline const KernelRegisters kernel_registers_table[] = {
#include "kernel_registers.h"
};
enum : unsigned { REGISTERS_PER_BLOCK = 65536 };

enum RegistersMode { REGISTERS_WARN, REGISTERS_STRICT, REGISTERS_REPORT };
inline void registers_report();
inline RegistersMode& registers_mode() {
    static RegistersMode m = [] {
        const char* e = getenv("KEEL_EMU_REGISTERS");
        if (!e || !*e) return REGISTERS_WARN;
        if (!strcmp(e, "strict")) return REGISTERS_STRICT;
        if (!strcmp(e, "report")) {
            atexit(registers_report);
            return REGISTERS_REPORT;
        }
        die("KEEL_EMU_REGISTERS=%s: expected strict or report%s", e);
    }();
    return m;
}
inline void set_registers_mode(RegistersMode m) {  // for tests
    if ((registers_mode() = m) == REGISTERS_REPORT) atexit(registers_report);
}

// The table's rows by kernel, with the rows tests add. Never destroyed, as the report's map below:
// the report reads both at exit.
inline std::unordered_map<std::string, std::vector<KernelRegisters>>& register_rows() {
    static auto* m = [] {
        auto* t = new std::unordered_map<std::string, std::vector<KernelRegisters>>;
        for (const KernelRegisters& r : kernel_registers_table) (*t)[r.kernel].push_back(r);
        return t;
    }();
    return *m;
}
// A row for a kernel the table does not have (test_cuda_emu's planted oversized kernels).
inline void kernel_registers_add(const char* kernel, int arch, int regs, int max_threads) {
    register_rows()[kernel].push_back(KernelRegisters{arch, regs, max_threads, kernel});
}

// "void ns::k<float, 4u>(float*)" → "ns::k<float, 4u>": less a template's return type and the
// parameters, and "> >" written ">>" (demanglers differ in that space; the table's script does the same).
inline std::string signature_name(std::string s) {
    if (s.compare(0, 5, "void ") == 0) s.erase(0, 5);
    if (!s.empty() && s.back() == ')') {
        int depth = 0;
        size_t i = s.size();
        while (i-- > 0) {
            if (s[i] == ')') depth++;
            else if (s[i] == '(' && --depth == 0) break;
        }
        if (i != (size_t)-1) s.erase(i);
    }
    for (size_t at; (at = s.find("> >")) != std::string::npos;) s.erase(at + 1, 1);
    return s;
}
// The demangled KernelTag<K> is "emu::KernelTag<&(void ns::k<float, 4u>(float*))>" for a template
// and "emu::KernelTag<&ns::k>" for a plain function.
inline std::string kernel_key_of_tag(const char* mangled) {
    int status = -1;
    char* d = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
    std::string s = status == 0 && d ? d : mangled;
    free(d);
    const std::string head = "emu::KernelTag<";
    if (s.compare(0, head.size(), head) == 0 && s.back() == '>') s = s.substr(head.size(), s.size() - head.size() - 1);
    if (!s.empty() && s[0] == '&') s.erase(0, 1);
    if (s.size() > 1 && s[0] == '(' && s.back() == ')') s = s.substr(1, s.size() - 2);
    return signature_name(s);
}
template <auto K> struct KernelTag {};
template <auto K> inline const std::string& kernel_key() {
    static const std::string key = kernel_key_of_tag(typeid(KernelTag<K>).name());
    return key;
}

// A block's registers as the GPU allocates them: per warp, the thread's count rounded up to 8, × 32.
inline unsigned block_registers(int regs, unsigned threads) { return (unsigned)(regs + 7) / 8 * 8 * 32 * ((threads + 31) / 32); }

// The row that allocates the kernel the most registers (the strictest architecture) and the
// smallest launch bound of its rows.
inline const KernelRegisters* strictest_row(const std::vector<KernelRegisters>& rows, int* max_threads) {
    const KernelRegisters* worst = nullptr;
    *max_threads = 0;
    for (const KernelRegisters& r : rows) {
        if (!worst || (r.regs + 7) / 8 > (worst->regs + 7) / 8) worst = &r;
        if (r.max_threads > 0 && (*max_threads == 0 || r.max_threads < *max_threads)) *max_threads = r.max_threads;
    }
    return worst;
}

inline std::map<std::string, unsigned>& registers_largest_block() {  // kernel → most threads launched (report)
    static auto* m = new std::map<std::string, unsigned>;
    return *m;
}

inline void registers_missing(const std::string& key) {
    static std::set<std::string> named;
    if (key.compare(0, 11, "keel_cuda::") != 0 || !named.insert(key).second) return;
    if (registers_mode() == REGISTERS_STRICT)
        die("kernel %s is not in test/cuda_emu/kernel_registers.h (KEEL_EMU_REGISTERS=strict): `make kernel-registers` (needs nvcc) adds it%s",
            key.c_str());
    fprintf(stderr, "cuda emulation: kernel %s is not in test/cuda_emu/kernel_registers.h: its registers are not checked "
            "(`make kernel-registers`, with nvcc, adds it)\n", key.c_str());
}

// Refuses a launch of `threads` per block that a GPU would refuse for registers or launch bounds.
inline void check_registers(const std::string& key, unsigned threads) {
    registers_mode();  // (a bad KEEL_EMU_REGISTERS is refused at the first launch)
    auto it = register_rows().find(key);
    if (it == register_rows().end()) return registers_missing(key);
    int bound = 0;
    const KernelRegisters* r = strictest_row(it->second, &bound);
    char msg[640];
    if (bound > 0 && threads > (unsigned)bound) {
        snprintf(msg, sizeof msg, "kernel %s: %u threads per block, over its __launch_bounds__(%d): on a GPU the launch fails",
                 key.c_str(), threads, bound);
        die("%s%s", msg);
    }
    unsigned need = block_registers(r->regs, threads);
    if (need > REGISTERS_PER_BLOCK) {
        snprintf(msg, sizeof msg,
                 "kernel %s: %d registers per thread on sm_%d (%d as allocated) × %u threads = %u registers, over the %u of a "
                 "block: on a GPU the launch fails (too many resources requested for launch)",
                 key.c_str(), r->regs, r->arch, (r->regs + 7) / 8 * 8, threads, need, (unsigned)REGISTERS_PER_BLOCK);
        die("%s%s", msg);
    }
    if (registers_mode() == REGISTERS_REPORT) {
        unsigned& most = registers_largest_block()[key];
        most = std::max(most, threads);
    }
}

// KEEL_EMU_REGISTERS=report, at exit: each checked kernel's largest block against the register file.
inline void registers_report() {
    std::vector<std::pair<unsigned, std::string>> lines;
    for (const auto& k : registers_largest_block()) {
        int bound = 0;
        const KernelRegisters* r = strictest_row(register_rows()[k.first], &bound);
        unsigned need = block_registers(r->regs, k.second);
        char line[512];
        snprintf(line, sizeof line, "cuda emulation: registers: %s: %d on sm_%d × %u threads = %u of %u (%u%%)%s", k.first.c_str(),
                 r->regs, r->arch, k.second, need, (unsigned)REGISTERS_PER_BLOCK, need * 100 / REGISTERS_PER_BLOCK,
                 bound > 0 ? (", launch bound " + std::to_string(bound)).c_str() : "");
        lines.emplace_back(need, line);
    }
    std::sort(lines.begin(), lines.end(), [](const auto& a, const auto& b) { return a.first != b.first ? a.first > b.first : a.second < b.second; });
    for (const auto& l : lines) fprintf(stderr, "%s\n", l.second.c_str());
}

}  // namespace emu
