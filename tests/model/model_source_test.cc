// Tests for model/model_source.
#include "model/model_source.h"

#include <gtest/gtest.h>
