// Configure-time probe (cmake/native_flags.cmake): exits 0 when the compiler builds short vector
// constants whose upper half is zero correctly. GCC 12.2 with AVX-512 enabled (-march=native on an
// AVX-512 CPU) builds {a, a, 0, 0} as {a, a, a, a}: any such literal in Tessera would be wrong.
#include <cstdint>
#include <cstdio>
#include <vector>

// The barrier makes the check read the stored values, not the compiler's own idea of them.
template <class T>
static int count_wrong(const std::vector<T>& v, size_t splat) {
  asm volatile("" : : "r"(v.data()) : "memory");
  int wrong = 0;
  for (size_t i = 0; i < v.size(); ++i) wrong += v[i] != (i < splat ? v[0] : T(0));
  return wrong;
}

int main() {
  const int wrong = count_wrong(std::vector<double>{16.0, 16.0, 0.0, 0.0}, 2) +
                    count_wrong(std::vector<float>{3.f, 3.f, 3.f, 3.f, 0.f, 0.f, 0.f, 0.f}, 4) +
                    count_wrong(std::vector<int64_t>{5, 5, 0, 0}, 2) +
                    count_wrong(std::vector<int32_t>{7, 7, 7, 7, 0, 0, 0, 0}, 4);
  std::printf("%d wrong\n", wrong);
  return wrong == 0 ? 0 : 1;
}
