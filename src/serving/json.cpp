// Boost.JSON, header-only, compiled once for the serving library. The library is built with
// hidden visibility, so these definitions do not meet a program's own copy of Boost.JSON.
#include <boost/json/src.hpp>
