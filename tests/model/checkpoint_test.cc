// Tests for model/checkpoint.
#include "model/checkpoint.h"

#include <gtest/gtest.h>
